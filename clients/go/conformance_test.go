package leasehold

// The conformance scenarios (clients/conformance/scenarios.txt) for the Go client, against the
// real binary and a real redis-server: the Rust, Python and Java clients run the same list.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

const lockKey = "leasehold:{job}:lock"

func waitForLine(t *testing.T, port int, line string, length string) {
	deadline := time.Now().Add(10 * time.Second)
	for redisCli(port, "ZCARD", line) != length {
		if time.Now().After(deadline) {
			t.Fatalf("%s never had %s waiters", line, length)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConformance_acquire_release(t *testing.T) {
	conn, port := start(t)
	lease, err := Acquire(context.Background(), conn, "job", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := lockToken(port, lockKey); got != lease.Token {
		t.Fatalf("lock key holds %q", got)
	}
	if held, err := lease.Release(); err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}
	if got := redisCli(port, "EXISTS", lockKey); got != "0" {
		t.Fatal("lock key still there after release")
	}
}

func TestConformance_fail_fast_names_holder(t *testing.T) {
	conn, _ := start(t)
	lease, err := Acquire(context.Background(), conn, "job", Options{Holder: "holder-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	_, err = Acquire(context.Background(), conn, "job", Options{})
	if !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "holder-a") {
		t.Fatalf("second acquire: %v", err)
	}
}

func TestConformance_wait_then_handoff(t *testing.T) {
	conn, port := start(t)
	first, err := Acquire(context.Background(), conn, "job", Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, failed := inBackground(func() (*Lease, error) {
		return Acquire(context.Background(), conn, "job", Options{Wait: 10 * time.Second})
	})
	waitForLine(t, port, "leasehold:{job}:line", "1")
	if held, err := first.Release(); err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}
	second := awaitHeld(t, got, failed, 10*time.Second, "no hand-off")
	defer second.Release()
	if second.FencingToken <= first.FencingToken {
		t.Fatalf("tokens %d then %d", first.FencingToken, second.FencingToken)
	}
}

func TestConformance_fencing_tokens_grow(t *testing.T) {
	conn, _ := start(t)
	var last uint64
	for i := 0; i < 5; i++ {
		lease, err := Acquire(context.Background(), conn, "job", Options{})
		if err != nil {
			t.Fatal(err)
		}
		if lease.FencingToken <= last {
			t.Fatalf("token %d after %d", lease.FencingToken, last)
		}
		last = lease.FencingToken
		if _, err := lease.Release(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConformance_lost_when_key_deleted(t *testing.T) {
	conn, port := start(t)
	lease, err := Acquire(context.Background(), conn, "job", Options{TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	redisCli(port, "DEL", lockKey)
	select {
	case <-lease.Lost():
		if !strings.Contains(lease.LostReason(), "deleted or taken") || !errors.Is(lease.Err(), LostTaken) {
			t.Fatalf("reason: %s (%v)", lease.LostReason(), lease.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lost() never closed")
	}
}

func TestConformance_lost_by_client_clock(t *testing.T) {
	conn, _, server := startServer(t)
	lease, err := Acquire(context.Background(), conn, "job", Options{TTL: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer server.Signal(syscall.SIGCONT)
	select {
	case <-lease.Lost():
		if !strings.Contains(lease.LostReason(), "server silent") || !errors.Is(lease.Err(), LostUnreachable) {
			t.Fatalf("reason: %s (%v)", lease.LostReason(), lease.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lost() never closed while the server was frozen")
	}
}

func TestConformance_bad_input_refused(t *testing.T) {
	conn, _ := start(t)
	_, err := Acquire(context.Background(), conn, "", Options{})
	if status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), "lock name is empty") {
		t.Fatalf("empty name: %v", err)
	}
}

func TestConformance_election_handover(t *testing.T) {
	conn, port := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := Campaign(ctx, conn, "vote", []byte("a"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	termA, err := a.Elected()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Campaign(ctx, conn, "vote", []byte("b"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitForLine(t, port, "leasehold:election:{vote}:line", "1")
	if wasLeader, err := a.Resign(); err != nil || !wasLeader {
		t.Fatalf("resign: %v %v", wasLeader, err)
	}
	termB, err := b.Elected()
	if err != nil || termB <= termA {
		t.Fatalf("b elected: term %d after %d, %v", termB, termA, err)
	}
	leader, err := CurrentLeader(ctx, conn, "vote")
	if err != nil || leader == nil || leader.Term != termB || string(leader.Value) != "b" {
		t.Fatalf("leader: %+v %v", leader, err)
	}
}

func TestConformance_revoke_ends_holding(t *testing.T) {
	r := startReplicas(t, 2)
	ctx := context.Background()
	lease, err := Acquire(ctx, r.conns[0], "job", Options{TTL: 5 * time.Second, Holder: "holder-a"})
	if err != nil {
		t.Fatal(err)
	}
	got, failed := inBackground(func() (*Lease, error) {
		return Acquire(ctx, r.conns[1], "job", Options{Wait: 10 * time.Second, Holder: "holder-b"})
	})
	waitForLine(t, r.redisPort, "leasehold:{job}:line", "1")
	revoked, err := Revoke(ctx, r.conns[1], "job", 0)
	if err != nil || len(revoked) != 1 || revoked[0].Holder != "holder-a" || revoked[0].FencingToken != lease.FencingToken {
		t.Fatalf("revoked %+v, %v", revoked, err)
	}
	within(t, lease.Lost(), "the holder never heard")
	if err := lease.Err(); !errors.Is(err, LostRevoked) {
		t.Fatalf("lost, but %v", err)
	}
	waiter := awaitHeld(t, got, failed, 2*time.Second, "the waiter never got the lock")
	if waiter.FencingToken <= lease.FencingToken || lockToken(r.redisPort, lockKey) != waiter.Token {
		t.Fatalf("the waiter holds fencing token %d after %d", waiter.FencingToken, lease.FencingToken)
	}
	if held, _ := lease.Release(); held {
		t.Fatal("the revoked lease was still held: resumed")
	}
	if held, err := waiter.Release(); !held || err != nil {
		t.Fatalf("the waiter's release: %v %v", held, err)
	}
	if revoked, err := Revoke(ctx, r.conns[1], "job", 0); len(revoked) != 0 || err != nil {
		t.Fatalf("revoked a free name: %+v, %v", revoked, err)
	}
}

func TestConformance_watch_reports_changes(t *testing.T) {
	conn, _ := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	states := watchInBackground(ctx, conn, "job")
	if state := states.next(t); state.Held {
		t.Fatalf("a free name reported %+v", state)
	}
	a, err := Acquire(ctx, conn, "job", Options{Holder: "holder-a"})
	if err != nil {
		t.Fatal(err)
	}
	if state := states.next(t); !state.Held || state.Holder != "holder-a" || state.FencingToken != a.FencingToken {
		t.Fatalf("after the acquire: %+v", state)
	}
	got, failed := inBackground(func() (*Lease, error) {
		return Acquire(ctx, conn, "job", Options{Wait: 10 * time.Second, Holder: "holder-b"})
	})
	if state := states.next(t); state.Holder != "holder-a" || state.Waiting != 1 {
		t.Fatalf("with a waiter: %+v", state)
	}
	if _, err := a.Release(); err != nil {
		t.Fatal(err)
	}
	state := states.next(t)
	for !state.Held { // the moment between the two holders, which may be seen
		state = states.next(t)
	}
	b := awaitHeld(t, got, failed, 2*time.Second, "the waiter never got the lock")
	if state.Holder != "holder-b" || state.FencingToken != b.FencingToken || b.FencingToken <= a.FencingToken {
		t.Fatalf("after the hand-off to fencing token %d: %+v", b.FencingToken, state)
	}
	if _, err := b.Release(); err != nil {
		t.Fatal(err)
	}
	if state := states.next(t); state.Held {
		t.Fatalf("after the last release: %+v", state)
	}
}

func TestConformance_semaphore_limit(t *testing.T) {
	conn, _ := start(t)
	ctx := context.Background()
	first, err := Acquire(ctx, conn, "pool", Options{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release()
	second, err := Acquire(ctx, conn, "pool", Options{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release()
	if first.FencingToken == second.FencingToken {
		t.Fatal("two permits with one fencing token")
	}
	if _, err := Acquire(ctx, conn, "pool", Options{Limit: 2}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a third permit: %v", err)
	}
	_, err = Acquire(ctx, conn, "pool", Options{Limit: 3})
	message := status.Convert(err).Message()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(message, "limit 2") ||
		!strings.Contains(message, "limit 3") {
		t.Fatalf("another limit: %v", err)
	}
}

func TestConformance_shared_readers(t *testing.T) {
	conn, port := start(t)
	ctx := context.Background()
	first, err := Acquire(ctx, conn, "catalog", Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	second, err := Acquire(ctx, conn, "catalog", Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	readers := max(first.FencingToken, second.FencingToken)
	writer, failed := inBackground(func() (*Lease, error) {
		return Acquire(ctx, conn, "catalog", Options{Wait: 10 * time.Second})
	})
	waitForLine(t, port, "leasehold:{catalog}:line", "1")
	select {
	case <-writer:
		t.Fatal("the writer got in beside the readers")
	default:
	}
	first.Release()
	second.Release()
	lease := awaitHeld(t, writer, failed, 10*time.Second, "the writer never got in")
	defer lease.Release()
	if lease.FencingToken <= readers {
		t.Fatalf("writer token %d not above the readers' %d", lease.FencingToken, readers)
	}
}

func TestConformance_resume_after_break(t *testing.T) {
	addr, port, _ := launch(t)
	ctx := context.Background()
	// A connection of our own, to break it as a network would.
	var mu sync.Mutex
	var raw []net.Conn
	dial := func(ctx context.Context, target string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
		mu.Lock()
		defer mu.Unlock()
		raw = append(raw, c)
		return c, err
	}
	breakable, err := grpc.NewClient(addr, grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer breakable.Close()
	// NoResume: this scenario resumes by hand what the client would otherwise resume itself.
	held, err := Acquire(ctx, breakable, "job", Options{TTL: 3 * time.Second, ResumeGrace: 2 * time.Second, NoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for _, c := range raw {
		c.Close()
	}
	mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pttl, _ := strconv.Atoi(redisCli(port, "PTTL", lockKey))
		if pttl >= 0 && pttl <= 2000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease was not shortened to its grace")
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = Acquire(ctx, conn, "job", Options{TTL: 3 * time.Second, ResumeToken: strings.Repeat("0", 32), NoResume: true})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("a wrong token: %v", err)
	}
	resumed, err := Acquire(ctx, conn, "job", Options{TTL: 3 * time.Second, ResumeToken: held.Token, NoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	if resumed.FencingToken != held.FencingToken || lockToken(port, lockKey) != held.Token {
		t.Fatalf("resumed with token %d (held %d)", resumed.FencingToken, held.FencingToken)
	}
	if wasHeld, err := resumed.Release(); err != nil || !wasHeld {
		t.Fatalf("release: %v %v", wasHeld, err)
	}
}

func TestConformance_survives_rolling_restart(t *testing.T) {
	r := startReplicas(t, 3)
	lease, err := Acquire(context.Background(), dial(t, r.list()), "job", Options{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fencingToken, token := lease.FencingToken, lease.Token
	r.holds(lease, fencingToken, token, 0, 1, 2)
	for i := range r.servers {
		r.stop(i, syscall.SIGTERM)
		confirmedAfter(t, lease, lease.ValidUntil())
		r.restart(i)
		r.holds(lease, fencingToken, token, 0, 1, 2)
	}
	if held, err := lease.Release(); err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}
	if got := redisCli(r.redisPort, "EXISTS", lockKey); got != "0" {
		t.Fatal("lock key still there after release")
	}
}

func TestConformance_survives_server_crash(t *testing.T) {
	r := startReplicas(t, 3)
	lease, err := Acquire(context.Background(), dial(t, r.list()), "job", Options{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fencingToken, token := lease.FencingToken, lease.Token
	r.stop(0, syscall.SIGKILL) // the one the lease is on: the first address
	r.stop(1, syscall.SIGKILL)
	confirmedAfter(t, lease, lease.ValidUntil())
	r.holds(lease, fencingToken, token, 2)
	if held, err := lease.Release(); err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}
	if got := redisCli(r.redisPort, "EXISTS", lockKey); got != "0" {
		t.Fatal("lock key still there after release")
	}
}

func TestConformance_refusal_details(t *testing.T) {
	conn, _ := start(t)
	ttl := 30 * time.Second
	lease, err := Acquire(context.Background(), conn, "job", Options{TTL: ttl, Holder: "holder-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	_, err = Acquire(context.Background(), conn, "job", Options{})
	var refused *Refusal
	if !errors.As(err, &refused) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second acquire: %v", err)
	}
	if refused.Code != codes.Aborted || refused.Reason != "LOCK_HELD" || refused.Holder != "holder-a" ||
		refused.Metadata["lock"] != "job" {
		t.Fatalf("refusal: %+v", refused)
	}
	if refused.RetryAfter <= 0 || refused.RetryAfter > ttl {
		t.Fatalf("retry after %v, the lock's TTL %v", refused.RetryAfter, ttl)
	}
}

func TestConformance_lists_held_locks(t *testing.T) {
	conn, _ := start(t)
	ctx := context.Background()
	lease, err := Acquire(ctx, conn, "job", Options{Holder: "holder-a"})
	if err != nil {
		t.Fatal(err)
	}
	find := func() *HeldLock {
		listing, err := List(ctx, conn, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, lock := range listing.Locks {
			if lock.Name == "job" {
				return &lock
			}
		}
		return nil
	}
	held := find()
	if held == nil || held.Holder != "holder-a" || held.FencingToken != lease.FencingToken {
		t.Fatalf("listed: %+v (fencing token %d)", held, lease.FencingToken)
	}
	if wasHeld, err := lease.Release(); err != nil || !wasHeld {
		t.Fatalf("release: %v %v", wasHeld, err)
	}
	if held := find(); held != nil {
		t.Fatalf("still listed after release: %+v", held)
	}
}

// vouched is a lease or leadership with a validity: *Lease, *SessionLease, *SessionLeader.
type vouched interface {
	ValidUntil() time.Time
	Lost() <-chan struct{}
	LostReason() string
}

// vouchedAfter waits until h is vouched for beyond `before` (an acquired or a renewal confirmed
// since), failing if it is lost meanwhile.
func vouchedAfter(t *testing.T, h vouched, before time.Time) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !h.ValidUntil().After(before) {
		select {
		case <-h.Lost():
			t.Fatalf("lost: %s", h.LostReason())
		case <-deadline:
			t.Fatal("never confirmed again")
		case <-tick.C:
		}
	}
}

// notLost fails if h was lost.
func notLost(t *testing.T, h vouched) {
	t.Helper()
	select {
	case <-h.Lost():
		t.Fatalf("lost: %s", h.LostReason())
	default:
	}
}

// lostAtOnce waits (10 s at most) for h to be lost before its validity ends, for a reason that
// contains `reason`.
func lostAtOnce(t *testing.T, h vouched, reason string) {
	t.Helper()
	select {
	case <-h.Lost():
		if now := time.Now(); !now.Before(h.ValidUntil()) {
			t.Fatalf("lost %v after its validity ended", now.Sub(h.ValidUntil()))
		}
		if got := h.LostReason(); !strings.Contains(got, reason) {
			t.Fatalf("reason: %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lost() never closed")
	}
}

// lostAlone waits (`within` at most) for `lost` to be lost, for a reason that contains
// `reason`, failing if `kept` is lost first.
func lostAlone(t *testing.T, lost, kept vouched, reason string, within time.Duration) {
	t.Helper()
	select {
	case <-lost.Lost():
		if !strings.Contains(lost.LostReason(), reason) {
			t.Fatalf("reason: %s", lost.LostReason())
		}
	case <-kept.Lost():
		t.Fatalf("the other lost: %s", kept.LostReason())
	case <-time.After(within):
		t.Fatal("Lost() never closed")
	}
}

// inBackground runs acquire on a goroutine of its own: what it acquires arrives on the first
// channel, its error on the second.
func inBackground[T any](acquire func() (T, error)) (chan T, chan error) {
	got, failed := make(chan T, 1), make(chan error, 1)
	go func() {
		held, err := acquire()
		if err != nil {
			failed <- err
			return
		}
		got <- held
	}()
	return got, failed
}

// awaitHeld waits (`within` at most) for what inBackground acquires, failing the test with its
// error, or with `never` if it does not come.
func awaitHeld[T any](t *testing.T, got <-chan T, failed <-chan error, within time.Duration, never string) T {
	t.Helper()
	select {
	case held := <-got:
		return held
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(within):
		t.Fatal(never)
	}
	panic("unreachable")
}

// holdLock takes the lock `name` on the session, failing the test if it cannot.
func holdLock(t *testing.T, session *Session, name string) *SessionLease {
	t.Helper()
	lease, err := session.Acquire(context.Background(), name, LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// newSession is NewSession, closed at cleanup.
func newSession(t *testing.T, conn *grpc.ClientConn, opts SessionOptions) *Session {
	t.Helper()
	session, err := NewSession(context.Background(), conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { session.Close() })
	return session
}

func TestConformance_session_holds_many(t *testing.T) {
	conn, port := start(t)
	ctx := context.Background()
	session := newSession(t, conn, SessionOptions{TTL: 5 * time.Second, Holder: "session-a"})
	a := holdLock(t, session, "a")
	b := holdLock(t, session, "b")
	permit, err := session.Acquire(ctx, "pool", LockOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if lockToken(port, "leasehold:{a}:lock") != a.Token || lockToken(port, "leasehold:{b}:lock") != b.Token {
		t.Fatal("a lock key does not hold its lease's token")
	}
	if redisCli(port, "ZSCORE", "leasehold:{pool}:lock:holders", permit.Token) == "" {
		t.Fatal("the semaphore's holders lack the permit's token")
	}
	for _, name := range []string{"a", "b"} {
		_, err := Acquire(ctx, conn, name, Options{})
		if !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "session-a") {
			t.Fatalf("another client's acquire of %s: %v", name, err)
		}
	}
	if held, err := a.Release(); err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}
	next, err := Acquire(ctx, conn, "a", Options{})
	if err != nil {
		t.Fatalf("a after its release: %v", err)
	}
	if next.FencingToken <= a.FencingToken {
		t.Fatalf("a new holder of a got fencing token %d after %d", next.FencingToken, a.FencingToken)
	}
	next.Release()
	if _, err := Acquire(ctx, conn, "b", Options{}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("b after a's release: %v", err)
	}
	if lockToken(port, "leasehold:{b}:lock") != b.Token ||
		redisCli(port, "ZSCORE", "leasehold:{pool}:lock:holders", permit.Token) == "" {
		t.Fatal("b or the permit was let go with a")
	}
	notLost(t, b)
	notLost(t, permit)
	if err := session.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, key := range []string{"leasehold:{b}:lock", "leasehold:{pool}:lock:holders"} {
		if got := redisCli(port, "EXISTS", key); got != "0" {
			t.Fatalf("%s still there after close", key)
		}
	}
	select {
	case <-session.Done():
	default:
		t.Fatal("Done() still open after Close")
	}
	notLost(t, b)
	if _, err := session.Acquire(ctx, "c", LockOptions{}); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("an acquire after close: %v", err)
	}
}

func TestConformance_session_lease_lost_alone(t *testing.T) {
	conn, port := start(t)
	session := newSession(t, conn, SessionOptions{TTL: 1500 * time.Millisecond})
	a := holdLock(t, session, "a")
	b := holdLock(t, session, "b")
	redisCli(port, "DEL", "leasehold:{a}:lock")
	lostAlone(t, a, b, "deleted or taken", 10*time.Second)
	vouchedAfter(t, b, b.ValidUntil())
	if got := lockToken(port, "leasehold:{b}:lock"); got != b.Token {
		t.Fatalf("b's key holds %q after the session was confirmed again", got)
	}
	notLost(t, b)
	select {
	case <-session.Lost():
		t.Fatalf("the session was lost: %s", session.LostReason())
	default:
	}
	if held, err := a.Release(); held || err != nil {
		t.Fatalf("release of a lost lease: %v %v", held, err)
	}
	if held, err := b.Release(); !held || err != nil {
		t.Fatalf("release of b: %v %v", held, err)
	}
}

func TestConformance_session_campaign(t *testing.T) {
	conn, port := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first := newSession(t, conn, SessionOptions{TTL: 2 * time.Second})
	second := newSession(t, conn, SessionOptions{TTL: 2 * time.Second})
	leaderA, err := first.Campaign(ctx, "vote", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if leaderA.Term == 0 {
		t.Fatal("a leader with term 0")
	}
	elected, failed := inBackground(func() (*SessionLeader, error) {
		return second.Campaign(ctx, "vote", []byte("b"))
	})
	waitForLine(t, port, "leasehold:election:{vote}:line", "1")
	select {
	case <-elected:
		t.Fatal("the second session leads beside the first")
	case err := <-failed:
		t.Fatal(err)
	default:
	}
	if err := first.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case leaderB := <-elected:
		if leaderB.Term <= leaderA.Term {
			t.Fatalf("term %d after %d", leaderB.Term, leaderA.Term)
		}
		leader, err := CurrentLeader(ctx, conn, "vote")
		if err != nil || leader == nil || leader.Term != leaderB.Term || string(leader.Value) != "b" {
			t.Fatalf("leader: %+v %v", leader, err)
		}
	case err := <-failed:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("the second session never led")
	}
}

func TestConformance_session_survives_server_crash(t *testing.T) {
	r := startReplicas(t, 3)
	ctx := context.Background()
	session := newSession(t, dial(t, r.list()), SessionOptions{TTL: 2 * time.Second})
	a := holdLock(t, session, "a")
	b := holdLock(t, session, "b")
	validA, validB := a.ValidUntil(), b.ValidUntil()
	r.stop(0, syscall.SIGKILL) // the one the session is on: the first address
	vouchedAfter(t, a, validA)
	vouchedAfter(t, b, validB)
	for _, lease := range []*SessionLease{a, b} {
		key := "leasehold:{" + lease.Name + "}:lock"
		if got := lockToken(r.redisPort, key); got != lease.Token {
			t.Fatalf("%s holds %q, not the lease's token", key, got)
		}
		described, err := pb.NewLockServiceClient(r.conns[2]).Describe(ctx, &pb.DescribeRequest{Name: lease.Name})
		if err != nil || !described.Held || described.FencingToken != lease.FencingToken {
			t.Fatalf("%s described as %v (%v), want fencing token %d", lease.Name, described, err, lease.FencingToken)
		}
	}
	c, err := session.Acquire(ctx, "c", LockOptions{})
	if err != nil {
		t.Fatalf("a new lock after the crash: %v", err)
	}
	if got := lockToken(r.redisPort, "leasehold:{c}:lock"); got != c.Token {
		t.Fatalf("c's key holds %q", got)
	}
	notLost(t, a)
	notLost(t, b)
	if err := session.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if got := redisCli(r.redisPort, "EXISTS", "leasehold:{"+name+"}:lock"); got != "0" {
			t.Fatalf("%s still held after close", name)
		}
	}
	notLost(t, a)
}

const (
	// frozenTTL is the frozen leader's TTL, and its resume grace (the default: the TTL).
	frozenTTL = 4 * time.Second
	// freeze is how long the leader stays frozen: well past the server's keepalive (200 ms +
	// 300 ms), well inside the validity its server last confirmed (at least two thirds of the
	// TTL, renewed every third of it).
	freeze = 2 * time.Second
	// frozenLeaderEnv is set (to the server's address) in the leader's own process: see
	// TestHelperFrozenLeader.
	frozenLeaderEnv = "LEASEHOLD_TEST_FROZEN_LEADER"
	// frozenSays starts each line the leader's process reports on stdout.
	frozenSays  = "frozen-leader: "
	electionKey = "leasehold:election:{vote}:lock"
)

// electionLease is the fencing token (the term) and the attachment (counted up by each resume)
// of the election lease in `key` (`<token>:<fencing token>:<attachment>:<holder>`).
func electionLease(t *testing.T, port int, key string) (uint64, uint64) {
	t.Helper()
	fields := strings.SplitN(redisCli(port, "GET", key), ":", 4)
	if len(fields) == 4 {
		fence, err1 := strconv.ParseUint(fields[1], 10, 64)
		attachment, err2 := strconv.ParseUint(fields[2], 10, 64)
		if err1 == nil && err2 == nil {
			return fence, attachment
		}
	}
	t.Fatalf("%s holds no lease: %q", key, fields)
	return 0, 0
}

// leaderProcess is the leader in a process of its own (this test binary again, running
// TestHelperFrozenLeader), which the test can freeze: its reports arrive on said, and
// "resign" on its stdin makes it resign. Killed at cleanup.
type leaderProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	said  chan string
}

func startLeaderProcess(t *testing.T, addr string) *leaderProcess {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFrozenLeader$", "-test.count=1")
	cmd.Env = append(os.Environ(), frozenLeaderEnv+"="+addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT); cmd.Process.Kill(); cmd.Wait() })
	said := make(chan string, 16)
	go func() {
		defer close(said)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if _, report, found := strings.Cut(lines.Text(), frozenSays); found {
				said <- report
			}
		}
	}()
	return &leaderProcess{cmd, stdin, said}
}

// next waits (10 s at most) for the next report, which must start with `what`: the rest of it.
func (p *leaderProcess) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case line, open := <-p.said:
		if !open {
			t.Fatalf("the leader's process exited before saying %s", what)
		}
		rest, found := strings.CutPrefix(line, what)
		if !found {
			t.Fatalf("the leader's process said %q, not %s", line, what)
		}
		return strings.TrimSpace(rest)
	case <-time.After(10 * time.Second):
		t.Fatalf("the leader's process never said %s", what)
	}
	return ""
}

func TestConformance_frozen_leader_not_replaced(t *testing.T) {
	addr, port, _ := launch(t, "--keepalive-interval", "200ms", "--keepalive-timeout", "300ms")
	leader := startLeaderProcess(t, addr)
	term, err := strconv.ParseUint(leader.next(t, "elected"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second, err := Campaign(ctx, conn, "vote", []byte("second"), frozenTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Resign()
	elected, failed := inBackground(second.Elected)
	waitForLine(t, port, "leasehold:election:{vote}:line", "1")
	fence, attached := electionLease(t, port, electionKey)
	if fence != term {
		t.Fatalf("the election's lease has fencing token %d, the leader term %d", fence, term)
	}

	// Frozen: the server's keepalive ends the leader's stream (a bare half-close, or a broken
	// transport) well before the freeze ends; the leadership is kept all the same.
	if err := leader.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	select {
	case termB := <-elected:
		t.Fatalf("the second candidate was elected (term %d) while the leader was frozen", termB)
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(freeze):
	}
	if err := leader.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	// Woken, the leader resumes its leadership (a new attachment) with its term, and leads.
	deadline := time.Now().Add(10 * time.Second)
	for {
		fence, attachment := electionLease(t, port, electionKey)
		if attachment > attached {
			if fence != term {
				t.Fatalf("resumed with fencing token %d, not the term %d", fence, term)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader never resumed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	now, err := CurrentLeader(ctx, conn, "vote")
	if err != nil || now == nil || now.Term != term || string(now.Value) != "frozen" {
		t.Fatalf("leader after the freeze: %+v %v", now, err)
	}
	select {
	case termB := <-elected:
		t.Fatalf("the second candidate leads (term %d) beside the resumed leader", termB)
	default:
	}

	if _, err := io.WriteString(leader.stdin, "resign\n"); err != nil {
		t.Fatal(err)
	}
	if wasLeader := leader.next(t, "resigned"); wasLeader != "true" {
		t.Fatalf("the leader resigned as leader: %s", wasLeader)
	}
	termB := awaitHeld(t, elected, failed, 10*time.Second, "the second candidate never led")
	if termB <= term {
		t.Fatalf("term %d after %d", termB, term)
	}
}

// TestHelperFrozenLeader is the leader of TestConformance_frozen_leader_not_replaced, run in a
// process of its own by that test (which sets frozenLeaderEnv to the server's address): it
// campaigns, reports "elected TERM", and on "resign" from stdin resigns and reports "resigned
// WAS_LEADER" (or "lost REASON" if the leadership ends first). Run any other way it skips.
func TestHelperFrozenLeader(t *testing.T) {
	addr := os.Getenv(frozenLeaderEnv)
	if addr == "" {
		t.Skip("the leader's process of TestConformance_frozen_leader_not_replaced, run by that test")
	}
	conn := dial(t, addr)
	candidate, err := Campaign(context.Background(), conn, "vote", []byte("frozen"), frozenTTL)
	if err != nil {
		t.Fatal(err)
	}
	term, err := candidate.Elected()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%selected %d\n", frozenSays, term)
	commands := make(chan string)
	go func() {
		// Also the end of stdin: the test is gone, and so is this process.
		lines := bufio.NewScanner(os.Stdin)
		lines.Scan()
		commands <- lines.Text()
	}()
	select {
	case <-candidate.Done():
		fmt.Printf("%slost %s\n", frozenSays, candidate.Lost())
		return
	case command := <-commands:
		if command != "resign" {
			t.Fatalf("command %q", command)
		}
	}
	wasLeader, err := candidate.Resign()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%sresigned %v\n", frozenSays, wasLeader)
}

// keyOf is the lock key of `name`.
func keyOf(name string) string { return "leasehold:{" + name + "}:lock" }

// holdsAll fails unless the holding of `token` with `fences` holds each of `names`, in that
// order, with a fencing token each: every name's key holds the token and that fencing token,
// and a wait-0 acquire of any name is refused.
func holdsAll(t *testing.T, conn *grpc.ClientConn, port int, token string, fences []Fence, names ...string) {
	t.Helper()
	if len(fences) != len(names) {
		t.Fatalf("fences %+v for %v", fences, names)
	}
	for i, name := range names {
		fence := fences[i]
		value := strings.SplitN(redisCli(port, "GET", keyOf(name)), ":", 3)
		if fence.Name != name || fence.FencingToken == 0 || len(value) < 2 || value[0] != token ||
			value[1] != strconv.FormatUint(fence.FencingToken, 10) {
			t.Fatalf("%s: fence %+v, key %v", name, fence, value)
		}
		if _, err := Acquire(context.Background(), conn, name, Options{}); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("a wait-0 acquire of %s while held: %v", name, err)
		}
	}
}

func TestConformance_all_or_none(t *testing.T) {
	conn, port := start(t)
	ctx := context.Background()
	b, err := Acquire(ctx, conn, "b", Options{Holder: "holder-b"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(ctx, conn, "a", Options{MoreNames: []string{"b"}})
	if status.Code(err) != codes.Aborted || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a wait-0 lease on [a, b] with b held: %v", err)
	}
	a, err := Acquire(ctx, conn, "a", Options{})
	if err != nil {
		t.Fatalf("a was left taken: %v", err)
	}
	if held, err := a.Release(); !held || err != nil {
		t.Fatalf("release of a: %v %v", held, err)
	}
	wait := 10 * time.Second
	gotAB, failedAB := inBackground(func() (*Lease, error) {
		return Acquire(ctx, conn, "a", Options{MoreNames: []string{"b"}, Wait: wait})
	})
	gotBA, failedBA := inBackground(func() (*Lease, error) {
		return Acquire(ctx, conn, "b", Options{MoreNames: []string{"a"}, Wait: wait})
	})
	waitForLine(t, port, "leasehold:{b}:line", "2") // both wait, b still held
	if held, err := b.Release(); !held || err != nil {
		t.Fatalf("release of b: %v %v", held, err)
	}
	for range 2 { // each gets its pair in turn, whichever first
		var lease *Lease
		var names []string
		select {
		case lease = <-gotAB:
			names, gotAB = []string{"a", "b"}, nil
		case lease = <-gotBA:
			names, gotBA = []string{"b", "a"}, nil
		case err := <-failedAB:
			t.Fatal(err)
		case err := <-failedBA:
			t.Fatal(err)
		case <-time.After(5 * time.Second):
			t.Fatal("no pair within 5 s: deadlock")
		}
		if lease.Fences[0].FencingToken != lease.FencingToken {
			t.Fatalf("fencing token %d, fences %+v", lease.FencingToken, lease.Fences)
		}
		holdsAll(t, conn, port, lease.Token, lease.Fences, names...)
		if held, err := lease.Release(); !held || err != nil {
			t.Fatalf("release of %v: %v %v", names, held, err)
		}
	}
	for _, name := range []string{"a", "b"} {
		if got := redisCli(port, "EXISTS", keyOf(name)); got != "0" {
			t.Fatalf("%s still taken after the last release", name)
		}
	}
}

func TestConformance_lock_delay_after_loss(t *testing.T) {
	conn, _ := start(t)
	ctx := context.Background()
	lease, err := Acquire(ctx, conn, "job", Options{TTL: 5 * time.Second, LockDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	revokeSent := time.Now()
	if revoked, err := Revoke(ctx, conn, "job", 0); len(revoked) != 1 || err != nil {
		t.Fatalf("revoked %+v, %v", revoked, err)
	}
	within(t, lease.Lost(), "the holder never heard")
	if err := lease.Err(); !errors.Is(err, LostRevoked) {
		t.Fatalf("lost, but %v", err)
	}
	if _, err := Acquire(ctx, conn, "job", Options{}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a wait-0 acquire within the lock-delay: %v", err)
	}
	waiter, err := Acquire(ctx, conn, "job", Options{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(revokeSent); waited < time.Second || waited > 5*time.Second {
		t.Fatalf("the waiter got the name %v after the revoke", waited)
	}
	if held, err := waiter.Release(); !held || err != nil {
		t.Fatalf("the waiter's release: %v %v", held, err)
	}
	clean, err := Acquire(ctx, conn, "job", Options{LockDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if held, err := clean.Release(); !held || err != nil {
		t.Fatalf("release: %v %v", held, err)
	}
	next, err := Acquire(ctx, conn, "job", Options{})
	if err != nil {
		t.Fatalf("a clean release left a lock-delay: %v", err)
	}
	next.Release()
}

// The scenario's TTL and max hold.
const (
	maxHoldScenarioTTL = time.Second
	maxHoldScenario    = time.Second
)

func TestConformance_max_hold_ends_lease(t *testing.T) {
	conn, port := start(t)
	ctx := context.Background()
	sent := time.Now()
	lease, err := Acquire(ctx, conn, "job", Options{TTL: maxHoldScenarioTTL, MaxHold: maxHoldScenario})
	if err != nil {
		t.Fatal(err)
	}
	// The client counts from a moment just after `sent` (when it sends): a few ms of slack.
	ceiling := sent.Add(maxHoldScenario + 25*time.Millisecond)
	// The validity, watched until the loss (every change seen within 5 ms), never passes the
	// ceiling.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(3*time.Second - time.Since(sent))
	for lost := false; !lost; {
		if until := lease.ValidUntil(); until.After(ceiling) {
			t.Fatalf("valid until %v past the ceiling", until.Sub(ceiling))
		}
		select {
		case <-lease.Lost():
			lost = true
		case <-tick.C:
		case <-deadline:
			t.Fatal("not lost within 3 s of the acquire")
		}
	}
	if after := time.Since(sent); after < maxHoldScenario || !errors.Is(lease.Err(), LostMaxHold) {
		t.Fatalf("lost %v after the acquire: %v", after, lease.Err())
	}
	if got := lockToken(port, lockKey); got != lease.Token {
		t.Fatalf("the key holds %q at the loss", got)
	}
	if _, err := Acquire(ctx, conn, "job", Options{}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a wait-0 acquire just after the loss: %v", err)
	}
	// No resume: nobody renews the key, which expires by its TTL from the last renewal.
	expired := time.Now().Add(maxHoldScenarioTTL + 2*time.Second)
	for redisCli(port, "EXISTS", lockKey) != "0" {
		if time.Now().After(expired) {
			t.Fatal("the key was still renewed after the loss")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if held, _ := lease.Release(); held {
		t.Fatal("a lease past its max hold was still held")
	}
}

func TestConformance_token_check(t *testing.T) {
	conn, _ := start(t)
	ctx := context.Background()
	first, err := Acquire(ctx, conn, "job", Options{})
	if err != nil {
		t.Fatal(err)
	}
	first.Release() // so that the lease below has a smaller fencing token to check, not 0
	if got, err := Check(ctx, conn, "job", first.FencingToken); err != nil || *got != (TokenCheck{State: TokenFree}) {
		t.Fatalf("a free name: %+v %v", got, err)
	}
	lease, err := Acquire(ctx, conn, "job", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Check(ctx, conn, "job", lease.FencingToken); err != nil || *got != (TokenCheck{TokenCurrent, lease.FencingToken}) {
		t.Fatalf("the holder's fencing token: %+v %v", got, err)
	}
	if got, err := Check(ctx, conn, "job", first.FencingToken); err != nil || *got != (TokenCheck{TokenSuperseded, lease.FencingToken}) {
		t.Fatalf("a smaller fencing token: %+v %v", got, err)
	}
	if held, err := lease.Release(); !held || err != nil {
		t.Fatalf("release: %v %v", held, err)
	}
	if got, err := Check(ctx, conn, "job", lease.FencingToken); err != nil || *got != (TokenCheck{State: TokenFree}) {
		t.Fatalf("after release: %+v %v", got, err)
	}
}
