package leasehold

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// replicas are leasehold servers sharing one redis-server, each on a port of its own, that a
// test stops and starts again on the same port.
type replicas struct {
	t         *testing.T
	redisPort int
	addrs     []string
	servers   []*exec.Cmd
	conns     []*grpc.ClientConn // one to each replica alone
}

func startReplicas(t *testing.T, n int) *replicas {
	r := &replicas{t: t, redisPort: startRedis(t)}
	for range n {
		addr, server := startLeasehold(t, r.redisPort, "127.0.0.1:0")
		r.addrs = append(r.addrs, addr)
		r.servers = append(r.servers, server)
		r.conns = append(r.conns, dial(t, addr))
	}
	return r
}

// dial is Dial, closed at cleanup.
func dial(t *testing.T, target string) *grpc.ClientConn {
	conn, err := Dial(target, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// list is every replica's address, comma-separated.
func (r *replicas) list() string { return strings.Join(r.addrs, ",") }

// stop signals replica i and waits until it has exited.
func (r *replicas) stop(i int, signal syscall.Signal) {
	r.t.Helper()
	if err := r.servers[i].Process.Signal(signal); err != nil {
		r.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { r.servers[i].Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		r.t.Fatalf("replica %d did not exit after %v", i, signal)
	}
}

// restart starts replica i again on its port, and waits until it serves.
func (r *replicas) restart(i int) {
	r.t.Helper()
	addr, server := startLeasehold(r.t, r.redisPort, r.addrs[i])
	if addr != r.addrs[i] {
		r.t.Fatalf("replica %d came back on %s, not %s", i, addr, r.addrs[i])
	}
	r.servers[i] = server
}

// untilServed retries call while the replica's connection is not back yet (UNAVAILABLE).
func untilServed(t *testing.T, call func() error) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := call()
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// confirmedAfter waits until the lease is vouched for beyond `before` (an acquired or extended
// received since): after its server went away, proof that it was resumed elsewhere.
func confirmedAfter(t *testing.T, lease *Lease, before time.Time) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !lease.ValidUntil().After(before) {
		select {
		case <-lease.Lost():
			t.Fatalf("the lease was lost: %s", lease.LostReason())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease was never confirmed again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holds checks that the lease still holds its lock "job": not lost, the lock key holds its
// token, and through each of the replicas `alive` the lock has its fencing token and a thief
// is refused.
func (r *replicas) holds(lease *Lease, fencingToken uint64, token string, alive ...int) {
	r.t.Helper()
	select {
	case <-lease.Lost():
		r.t.Fatalf("the lease was lost: %s", lease.LostReason())
	default:
	}
	if lease.FencingToken != fencingToken || lease.Token != token {
		r.t.Fatalf("the lease now has fencing token %d (was %d)", lease.FencingToken, fencingToken)
	}
	if got := lockToken(r.redisPort, lockKey); got != token {
		r.t.Fatalf("the lock key holds %q, not the lease's token", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, i := range alive {
		var described *pb.DescribeResponse
		err := untilServed(r.t, func() (err error) {
			described, err = pb.NewLockServiceClient(r.conns[i]).Describe(ctx, &pb.DescribeRequest{Name: "job"})
			return err
		})
		if err != nil || !described.Held || described.FencingToken != fencingToken {
			r.t.Fatalf("replica %d describes %v (%v), want fencing token %d", i, described, err, fencingToken)
		}
		err = untilServed(r.t, func() error {
			thief, err := Acquire(ctx, r.conns[i], "job", Options{TTL: 2 * time.Second, NoResume: true})
			if err == nil {
				thief.Release()
				return errors.New("a thief took the lock")
			}
			return err
		})
		if !errors.Is(err, ErrNotAcquired) {
			r.t.Fatalf("a thief through replica %d: %v", i, err)
		}
	}
}

// A lease whose server is gone for good and whose key was deleted meanwhile is lost as soon as
// the resume is refused (NOT_FOUND), well before its validity ends.
func TestAResumeRefusedIsLostAtOnce(t *testing.T) {
	r := startReplicas(t, 2)
	lease, err := Acquire(context.Background(), dial(t, r.list()), "job", Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Frozen first, so that no renewal finds the key gone before the crash.
	if err := r.servers[0].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	redisCli(r.redisPort, "DEL", lockKey)
	r.stop(0, syscall.SIGKILL)
	lostAtOnce(t, lease, "could not resume the lease: NotFound")
	if held, err := lease.Release(); held || err != nil {
		t.Fatalf("release of a lost lease: %v %v", held, err)
	}
}

// A lease that no server can resume is lost when its validity ends, not later.
func TestALeaseNoServerCanResumeIsLostByItsValidity(t *testing.T) {
	r := startReplicas(t, 2)
	lease, err := Acquire(context.Background(), dial(t, r.list()), "job", Options{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.stop(1, syscall.SIGKILL)
	r.stop(0, syscall.SIGKILL)
	select {
	case <-lease.Lost():
		late := time.Since(lease.ValidUntil())
		if late < 0 || late > 500*time.Millisecond {
			t.Fatalf("lost %v after the validity ended", late)
		}
		if reason := lease.LostReason(); !strings.Contains(reason, "could not resume before the lease's validity ran out: Unavailable") {
			t.Fatalf("reason: %s", reason)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lost() never closed")
	}
}

// Released while no server answers: the unary Release is tried until one does.
func TestReleasingALeaseBetweenServers(t *testing.T) {
	r := startReplicas(t, 2)
	lease, err := Acquire(context.Background(), dial(t, r.list()), "job", Options{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.stop(1, syscall.SIGKILL)
	r.stop(0, syscall.SIGKILL)
	released := make(chan error, 1)
	go func() {
		held, err := lease.Release()
		if err == nil && !held {
			err = errors.New("released a lease that was not held")
		}
		released <- err
	}()
	r.restart(1)
	select {
	case err := <-released:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Release() never returned")
	}
	if got := redisCli(r.redisPort, "EXISTS", lockKey); got != "0" {
		t.Fatal("lock key still there after release")
	}
}
