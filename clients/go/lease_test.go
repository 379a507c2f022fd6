package leasehold

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func redisCli(port int, args ...string) string {
	out, _ := exec.Command("redis-cli", append([]string{"-p", strconv.Itoa(port)}, args...)...).Output()
	return strings.TrimSpace(string(out))
}

// lockToken is the token in a lock key's value (`<token>:<fencing token>:<attachment>:<holder>`).
func lockToken(port int, key string) string {
	return strings.SplitN(redisCli(port, "GET", key), ":", 2)[0]
}

// start runs a redis-server and a leasehold server of the test's own; both stop at cleanup.
func start(t *testing.T) (*grpc.ClientConn, int) {
	conn, port, _ := startServer(t)
	return conn, port
}

// startServer is start, also returning the leasehold server's process (to freeze it).
func startServer(t *testing.T) (*grpc.ClientConn, int, *os.Process) {
	addr, port, process := launch(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, port, process
}

// launch starts redis-server and the leasehold binary (with extra serve arguments): the
// server's address, Redis's port, and the server's process.
func launch(t *testing.T, extra ...string) (string, int, *os.Process) {
	port := startRedis(t)
	addr, server := startLeasehold(t, port, "127.0.0.1:0", extra...)
	return addr, port, server.Process
}

// startRedis runs a redis-server of the test's own on a free port, which it returns; it stops
// at cleanup.
func startRedis(t *testing.T) int {
	port := freePort(t)
	redis := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := redis.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { redis.Process.Kill(); redis.Wait() })
	deadline := time.Now().Add(5 * time.Second)
	for redisCli(port, "ping") != "PONG" {
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return port
}

// startLeasehold runs the leasehold binary on Redis's port, listening on `listen`, and waits
// until it serves: its address and its process, stopped at cleanup.
func startLeasehold(t *testing.T, redisPort int, listen string, extra ...string) (string, *exec.Cmd) {
	t.Helper()
	binary := os.Getenv("LEASEHOLD_BIN")
	args := append([]string{"serve", "--listen", listen, "--redis",
		"redis://127.0.0.1:" + strconv.Itoa(redisPort)}, extra...)
	server := exec.Command(binary, args...)
	stdout, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Process.Signal(syscall.SIGCONT); server.Process.Kill(); server.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "leasehold: listening on ") {
		t.Fatalf("server did not start: %q %v", line, err)
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "leasehold: listening on ")), server
}

func TestLeaseHoldsExcludesAndReleases(t *testing.T) {
	conn, port := start(t)
	ctx := context.Background()
	lease, err := Acquire(ctx, conn, "job", Options{TTL: 5 * time.Second, Holder: "go-test"})
	if err != nil {
		t.Fatal(err)
	}
	if lease.FencingToken == 0 {
		t.Fatal("no fencing token")
	}
	if got := lockToken(port, "leasehold:{job}:lock"); got != lease.Token {
		t.Fatalf("lock key holds %q, want our token", got)
	}
	_, err = Acquire(ctx, conn, "job", Options{})
	if !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "go-test") {
		t.Fatalf("second acquire: %v", err)
	}
	held, err := lease.Release()
	if err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}
	if got := redisCli(port, "EXISTS", "leasehold:{job}:lock"); got != "0" {
		t.Fatalf("lock still there after release: %s", got)
	}
}

func TestLostClosesWhenTheLockIsTakenAway(t *testing.T) {
	conn, port := start(t)
	lease, err := Acquire(context.Background(), conn, "job", Options{TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	redisCli(port, "DEL", "leasehold:{job}:lock")
	select {
	case <-lease.Lost():
		if !strings.Contains(lease.LostReason(), "deleted or taken") {
			t.Fatalf("reason: %s", lease.LostReason())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() never closed")
	}
}

// A cancelled call is the client's choice, not a broken connection: even a resumable lease is
// released at once.
func TestCancellingAResumableLeaseReleasesIt(t *testing.T) {
	conn, port := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := Acquire(ctx, conn, "job", Options{TTL: 30 * time.Second, ResumeGrace: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(3 * time.Second)
	for redisCli(port, "EXISTS", "leasehold:{job}:lock") != "0" {
		if time.Now().After(deadline) {
			t.Fatal("a cancelled resumable lease was kept")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
