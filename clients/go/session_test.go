package leasehold

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// A refused acquire on a session is the *Refusal a Lease stream gives, read from `failed`; the
// session and its leases go on.
func TestSessionRefusalsAreTheLeaseAPIs(t *testing.T) {
	conn, _ := start(t)
	ctx := context.Background()
	ttl := 10 * time.Second
	holder, err := Acquire(ctx, conn, "job", Options{TTL: ttl, Holder: "holder-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	session := newSession(t, conn, SessionOptions{TTL: 2 * time.Second})
	_, err = session.Acquire(ctx, "job", LockOptions{})
	var refused *Refusal
	if !errors.As(err, &refused) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("acquire of a held lock: %v", err)
	}
	if refused.Code != codes.Aborted || refused.Reason != "LOCK_HELD" || refused.Holder != "holder-a" ||
		refused.Metadata["lock"] != "job" || refused.RetryAfter <= 0 || refused.RetryAfter > ttl {
		t.Fatalf("refusal: %+v", refused)
	}
	_, err = session.Acquire(ctx, "", LockOptions{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "lock name is empty") {
		t.Fatalf("empty name: %v", err)
	}
	lease, err := session.Acquire(ctx, "other", LockOptions{})
	if err != nil {
		t.Fatalf("the session after two refusals: %v", err)
	}
	if held, err := lease.Release(); !held || err != nil {
		t.Fatalf("release: %v %v", held, err)
	}
	if held, err := lease.Release(); !held || err != nil {
		t.Fatalf("a second release: %v %v", held, err)
	}
}

// Cancelling a wait lets go of it: the waiter leaves the line, and the lock, once free, is not
// taken for nobody.
func TestSessionCancelledWaitLeavesTheLine(t *testing.T) {
	conn, port := start(t)
	holder, err := Acquire(context.Background(), conn, "job", Options{})
	if err != nil {
		t.Fatal(err)
	}
	session := newSession(t, conn, SessionOptions{TTL: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	failed := make(chan error, 1)
	go func() {
		_, err := session.Acquire(ctx, "job", LockOptions{Wait: 30 * time.Second})
		failed <- err
	}()
	waitForLine(t, port, "leasehold:{job}:line", "1")
	cancel()
	select {
	case err := <-failed:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return when cancelled")
	}
	waitForLine(t, port, "leasehold:{job}:line", "0")
	holder.Release()
	if got := redisCli(port, "EXISTS", lockKey); got != "0" {
		t.Fatal("the lock was taken after its waiter gave up")
	}
	// The session goes on.
	lease := holdLock(t, session, "job")
	lease.Release()
}

// A frozen server (SIGSTOP): every lease of the session is lost by the client's own clock.
func TestSessionLeasesLostByClientClock(t *testing.T) {
	conn, _, server := startServer(t)
	session := newSession(t, conn, SessionOptions{TTL: 500 * time.Millisecond})
	a := holdLock(t, session, "a")
	b := holdLock(t, session, "b")
	if err := server.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer server.Signal(syscall.SIGCONT)
	for _, lease := range []*SessionLease{a, b} {
		select {
		case <-lease.Lost():
			if !strings.Contains(lease.LostReason(), "server silent") {
				t.Fatalf("reason: %s", lease.LostReason())
			}
			if late := time.Since(lease.ValidUntil()); late < 0 || late > 500*time.Millisecond {
				t.Fatalf("lost %v after its validity", late)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Lost() never closed while the server was frozen")
		}
	}
}

// A leader on a session publishes values, and resigns.
func TestSessionLeaderProclaimsAndResigns(t *testing.T) {
	conn, _ := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	session := newSession(t, conn, SessionOptions{TTL: 2 * time.Second})
	leader, err := session.Campaign(ctx, "vote", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Proclaim(ctx, []byte("two")); err != nil {
		t.Fatal(err)
	}
	current, err := CurrentLeader(ctx, conn, "vote")
	if err != nil || current == nil || current.Term != leader.Term || string(current.Value) != "two" {
		t.Fatalf("leader: %+v %v", current, err)
	}
	if wasLeader, err := leader.Resign(); !wasLeader || err != nil {
		t.Fatalf("resign: %v %v", wasLeader, err)
	}
	if current, err := CurrentLeader(ctx, conn, "vote"); err != nil || current != nil {
		t.Fatalf("leader after resigning: %+v %v", current, err)
	}
	if err := leader.Proclaim(ctx, []byte("three")); err == nil {
		t.Fatal("proclaimed after resigning")
	}
}

// Cancelling the context a session was opened with closes it: its leases are released.
func TestCancellingTheSessionContextClosesIt(t *testing.T) {
	conn, port := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	session, err := NewSession(ctx, conn, SessionOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := session.Acquire(context.Background(), "job", LockOptions{}); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-session.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end")
	}
	if err := session.Close(); err != nil {
		t.Fatalf("close after the context ended: %v", err)
	}
	if got := redisCli(port, "EXISTS", lockKey); got != "0" {
		t.Fatal("the lock was kept after the session's context ended")
	}
}

// A session survives each of its servers shutting down in turn (SIGTERM: HANDED_OVER), with
// its leases and its leadership, never reported lost.
func TestSessionSurvivesRollingRestart(t *testing.T) {
	r := startReplicas(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session := newSession(t, dial(t, r.list()), SessionOptions{TTL: 2 * time.Second})
	lease, err := session.Acquire(ctx, "job", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leader, err := session.Campaign(ctx, "vote", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.servers {
		validLease, validLeader := lease.ValidUntil(), leader.ValidUntil()
		r.stop(i, syscall.SIGTERM)
		vouchedAfter(t, lease, validLease)
		vouchedAfter(t, leader, validLeader)
		r.restart(i)
		if got := lockToken(r.redisPort, lockKey); got != lease.Token {
			t.Fatalf("the lock key holds %q after replica %d restarted", got, i)
		}
		current, err := CurrentLeader(ctx, r.conns[(i+1)%3], "vote")
		if err != nil || current == nil || current.Term != leader.Term || string(current.Value) != "a" {
			t.Fatalf("leader after replica %d restarted: %+v %v", i, current, err)
		}
	}
	if err := leader.Proclaim(ctx, []byte("b")); err != nil {
		t.Fatal(err)
	}
	notLost(t, lease)
	notLost(t, leader)
	if err := session.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := redisCli(r.redisPort, "EXISTS", lockKey); got != "0" {
		t.Fatal("lock key still there after close")
	}
}

// Without resumption a server's shutdown loses the session, and every lease with it.
func TestSessionWithoutResumeIsLostWhenItsServerStops(t *testing.T) {
	r := startReplicas(t, 2)
	session := newSession(t, dial(t, r.list()), SessionOptions{TTL: 5 * time.Second, NoResume: true})
	lease := holdLock(t, session, "job")
	r.stop(0, syscall.SIGTERM)
	for _, lost := range []<-chan struct{}{session.Lost(), lease.Lost()} {
		select {
		case <-lost:
		case <-time.After(10 * time.Second):
			t.Fatal("not lost when the server stopped")
		}
	}
	if !strings.Contains(session.LostReason(), "shutting down") || lease.LostReason() != session.LostReason() {
		t.Fatalf("reasons: session %q, lease %q", session.LostReason(), lease.LostReason())
	}
	if _, err := session.Acquire(context.Background(), "other", LockOptions{}); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("an acquire on a lost session: %v", err)
	}
	if err := session.Close(); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("close of a lost session: %v", err)
	}
}

// A lease whose resume is refused (NOT_FOUND: its key was deleted while its server was gone)
// is lost alone, at once; the session's other lease resumes.
func TestSessionResumeRefusedLosesThatLeaseAlone(t *testing.T) {
	r := startReplicas(t, 2)
	session := newSession(t, dial(t, r.list()), SessionOptions{TTL: 5 * time.Second})
	a := holdLock(t, session, "a")
	b := holdLock(t, session, "b")
	// Frozen first, so that no renewal finds the key gone before the crash.
	if err := r.servers[0].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	redisCli(r.redisPort, "DEL", "leasehold:{a}:lock")
	validB := b.ValidUntil()
	r.stop(0, syscall.SIGKILL)
	lostAtOnce(t, a, "could not resume the lease: NotFound")
	vouchedAfter(t, b, validB)
	if got := lockToken(r.redisPort, "leasehold:{b}:lock"); got != b.Token {
		t.Fatalf("b's key holds %q", got)
	}
}

// fakeSessions is a SessionService whose streams a test drives by hand.
type fakeSessions struct {
	pb.UnimplementedSessionServiceServer
	streams chan pb.SessionService_SessionServer
}

func (f *fakeSessions) Session(stream pb.SessionService_SessionServer) error {
	f.streams <- stream
	<-stream.Context().Done()
	return nil
}

// fakeServer serves fakeSessions on a port of its own: a connection to it, and its streams.
func fakeServer(t *testing.T) (*grpc.ClientConn, chan pb.SessionService_SessionServer) {
	fake := &fakeSessions{streams: make(chan pb.SessionService_SessionServer, 4)}
	conn := serveFake(t, func(server *grpc.Server) { pb.RegisterSessionServiceServer(server, fake) })
	return conn, fake.streams
}

// recv is the next request on a fake stream.
func recv(t *testing.T, stream pb.SessionService_SessionServer) *pb.SessionRequest {
	t.Helper()
	request, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return request
}

// openFake opens a session on a fake server and reads its `open`: the session, its stream on
// the server, and when it was opened (before NewSession).
func openFake(t *testing.T) (*Session, pb.SessionService_SessionServer, time.Time) {
	conn, streams := fakeServer(t)
	opened := time.Now()
	session, err := NewSession(context.Background(), conn, SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(session.stop)
	stream := <-streams
	if open := recv(t, stream).GetOpen(); open == nil || open.TtlMs != 10_000 || open.ResumeGraceMs != 10_000 {
		t.Fatalf("first message: %v", open)
	}
	return session, stream, opened
}

// acquireOnFake starts an Acquire of `name` on a fake session: its request's id, and where its
// outcome arrives.
func acquireOnFake(t *testing.T, session *Session, stream pb.SessionService_SessionServer, name string) (uint64, chan *SessionLease, chan error) {
	t.Helper()
	leases, failed := inBackground(func() (*SessionLease, error) {
		return session.Acquire(context.Background(), name, LockOptions{})
	})
	acquire := recv(t, stream).GetAcquire()
	if acquire == nil || acquire.Name != name {
		t.Fatalf("expected an acquire of %s, got %v", name, acquire)
	}
	return acquire.Id, leases, failed
}

func sendEvent(t *testing.T, stream pb.SessionService_SessionServer, event *pb.SessionResponse) {
	t.Helper()
	if err := stream.Send(event); err != nil {
		t.Fatal(err)
	}
}

func acquiredEvent(id, fencingToken uint64, validForMs uint32, validToMs uint64) *pb.SessionResponse {
	return &pb.SessionResponse{Event: &pb.SessionResponse_Acquired{Acquired: &pb.SessionAcquired{
		Id: id, Token: "token", FencingToken: fencingToken, ValidForMs: validForMs, ValidToMs: validToMs,
	}}}
}

// An `acquired` whose validity, counted from the session's open, has passed on arrival is no
// lease: ErrStale, and the lease is let go.
func TestSessionStaleAcquiredIsNoLease(t *testing.T) {
	session, stream, opened := openFake(t)
	id, _, failed := acquireOnFake(t, session, stream, "job")
	// valid_to_ms 1: over once a millisecond has passed since the open, whatever valid_for says.
	time.Sleep(time.Until(opened.Add(2 * time.Millisecond)))
	sendEvent(t, stream, acquiredEvent(id, 7, 10_000, 1))
	if err := <-failed; !errors.Is(err, ErrStale) {
		t.Fatalf("a stale acquired: %v", err)
	}
	if release := recv(t, stream).GetRelease(); release == nil || release.Id != id {
		t.Fatalf("expected the stale lease's release, got %v", release)
	}
}

// A kept_alive vouches for the leases acquired before it, not for one acquired after: that one
// is lost by the client's clock at the end of its own acquisition's validity, alone, and let go.
func TestSessionKeptAliveVouchesForEarlierLeasesOnly(t *testing.T) {
	session, stream, _ := openFake(t)
	idA, leases, _ := acquireOnFake(t, session, stream, "a")
	sendEvent(t, stream, acquiredEvent(idA, 1, 300, 0))
	a := <-leases
	sendEvent(t, stream, &pb.SessionResponse{Event: &pb.SessionResponse_KeptAlive{KeptAlive: &pb.SessionKeptAlive{
		TtlMs: 10_000, ValidForMs: 5_000, ValidToMs: 0,
	}}})
	idB, leases, _ := acquireOnFake(t, session, stream, "b")
	sendEvent(t, stream, acquiredEvent(idB, 2, 300, 0))
	b := <-leases
	lostAlone(t, b, a, "server silent", 5*time.Second)
	if err := b.Err(); !errors.Is(err, LostUnreachable) || errors.Is(err, ErrSessionLost) {
		t.Fatalf("lost by its clock, but %v", err)
	}
	if until := a.ValidUntil(); time.Until(until) < 3*time.Second {
		t.Fatalf("a is vouched for only until %v from now", time.Until(until))
	}
	notLost(t, a)
	if release := recv(t, stream).GetRelease(); release == nil || release.Id != idB {
		t.Fatalf("expected b's release, got %v", release)
	}
}

// A wait outlives its server: asked for again on the next one, it gets the lock when freed.
func TestSessionWaitOutlivesItsServer(t *testing.T) {
	r := startReplicas(t, 2)
	holder, err := Acquire(context.Background(), r.conns[1], "job", Options{TTL: 5 * time.Second, NoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	session := newSession(t, dial(t, r.list()), SessionOptions{TTL: 2 * time.Second})
	leases, failed := inBackground(func() (*SessionLease, error) {
		return session.Acquire(context.Background(), "job", LockOptions{Wait: 30 * time.Second})
	})
	waitForLine(t, r.redisPort, "leasehold:{job}:line", "1")
	r.stop(0, syscall.SIGKILL) // the session's server, with its wait
	if held, err := holder.Release(); !held || err != nil {
		t.Fatalf("release: %v %v", held, err)
	}
	lease := awaitHeld(t, leases, failed, 30*time.Second, "the wait never ended")
	if lease.FencingToken <= holder.FencingToken || lockToken(r.redisPort, lockKey) != lease.Token {
		t.Fatalf("got fencing token %d after %d", lease.FencingToken, holder.FencingToken)
	}
}

// Released while its server is gone: the release waits for the lease's resume, and is
// confirmed there.
func TestSessionReleaseBetweenServers(t *testing.T) {
	r := startReplicas(t, 2)
	session := newSession(t, dial(t, r.list()), SessionOptions{TTL: 3 * time.Second})
	lease := holdLock(t, session, "job")
	r.stop(0, syscall.SIGKILL)
	if held, err := lease.Release(); !held || err != nil {
		t.Fatalf("release: %v %v", held, err)
	}
	if got := redisCli(r.redisPort, "EXISTS", lockKey); got != "0" {
		t.Fatal("lock key still there after release")
	}
	notLost(t, lease)
}
