package leasehold

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// A lease of several names asks for them all (with its lock-delay and max hold), knows each
// name's fencing token in the order asked, resumes with the same names, and releases them.
func TestALeaseOfSeveralNamesKnowsEachFenceAndResumesWithThem(t *testing.T) {
	conn, locks, _ := serveFakes(t)
	leases, failed := inBackground(func() (*Lease, error) {
		return Acquire(context.Background(), conn, "a", Options{
			TTL: 10 * time.Second, MoreNames: []string{"c", "b"}, LockDelay: 1500 * time.Millisecond, MaxHold: time.Minute,
		})
	})
	stream := within(t, locks.leases, "no Lease stream")
	request, err := stream.Recv()
	if acquire := request.GetAcquire(); err != nil || acquire.Name != "a" || !slices.Equal(acquire.MoreNames, []string{"c", "b"}) ||
		acquire.LockDelayMs != 1500 || acquire.MaxHoldMs != 60_000 {
		t.Fatalf("asked %v, %v", request, err)
	}
	acquired := &pb.LeaseResponse{Event: &pb.LeaseResponse_Acquired{Acquired: &pb.Acquired{
		Token: "token", FencingToken: 7, TtlMs: 10_000, ValidForMs: 10_000,
		Fences: []*pb.NameFence{{Name: "a", FencingToken: 7}, {Name: "c", FencingToken: 2}, {Name: "b", FencingToken: 5}},
	}}}
	send(t, stream, acquired)
	lease := awaitHeld(t, leases, failed, 2*time.Second, "not acquired")
	if want := []Fence{{"a", 7}, {"c", 2}, {"b", 5}}; !slices.Equal(lease.Fences, want) || lease.FencingToken != 7 {
		t.Fatalf("fences %+v, fencing token %d", lease.Fences, lease.FencingToken)
	}
	locks.ends <- status.Error(codes.Unavailable, "the server went away")
	stream = within(t, locks.leases, "not resumed")
	request, err = stream.Recv()
	if resume := request.GetAcquire(); err != nil || resume.Name != "a" || !slices.Equal(resume.MoreNames, []string{"c", "b"}) ||
		resume.ResumeToken != "token" {
		t.Fatalf("resumed with %v, %v", request, err)
	}
	send(t, stream, acquired)
	released := make(chan bool, 1)
	go func() {
		held, _ := lease.Release()
		released <- held
	}()
	if request, err := stream.Recv(); err != nil || request.GetRelease() == nil {
		t.Fatalf("expected a release, got %v, %v", request, err)
	}
	send(t, stream, &pb.LeaseResponse{Event: &pb.LeaseResponse_Released{Released: &pb.Released{WasHeld: true}}})
	locks.ends <- nil
	if !within(t, released, "no answer to the release") {
		t.Fatal("released, but not held")
	}
}

// A release between two streams names every name; a server that predates fences gives a lease
// of one name its fencing token as its one fence.
func TestReleaseNamesEveryNameAndOneNameHasOneFence(t *testing.T) {
	release := leaseStream{name: "a", moreNames: []string{"b"}}.releaseRequest("token")
	if release.Name != "a" || !slices.Equal(release.MoreNames, []string{"b"}) || release.Token != "token" {
		t.Fatalf("release %v", release)
	}
	if got := fencesOr(fences(nil), "a", 7); !slices.Equal(got, []Fence{{"a", 7}}) {
		t.Fatalf("no fences from the server: %+v", got)
	}
}

// A session's lease of several names asks for them with its lock-delay and max hold and knows
// each name's fencing token.
func TestASessionLeaseOfSeveralNamesKnowsEachFence(t *testing.T) {
	session, stream, _ := openFake(t)
	leases, failed := inBackground(func() (*SessionLease, error) {
		return session.Acquire(context.Background(), "a", LockOptions{MoreNames: []string{"b"}, LockDelay: time.Second, MaxHold: time.Hour})
	})
	acquire := recv(t, stream).GetAcquire()
	if acquire == nil || acquire.Name != "a" || !slices.Equal(acquire.MoreNames, []string{"b"}) || acquire.LockDelayMs != 1000 ||
		acquire.MaxHoldMs != 3_600_000 {
		t.Fatalf("asked %v", acquire)
	}
	acquired := acquiredEvent(acquire.Id, 4, 10_000, 0)
	acquired.GetAcquired().Fences = []*pb.NameFence{{Name: "a", FencingToken: 4}, {Name: "b", FencingToken: 9}}
	sendEvent(t, stream, acquired)
	lease := awaitHeld(t, leases, failed, 2*time.Second, "not acquired")
	if want := []Fence{{"a", 4}, {"b", 9}}; !slices.Equal(lease.Fences, want) || lease.FencingToken != 4 {
		t.Fatalf("fences %+v, fencing token %d", lease.Fences, lease.FencingToken)
	}
}

// Against the server: a session's lease of two names holds both, a fencing token each, and at
// its max hold is lost alone, for MAX_HOLD, while the session and its other lease go on.
func TestASessionLeaseOfTwoNamesHoldsBothUntilItsMaxHold(t *testing.T) {
	conn, port := start(t)
	session := newSession(t, conn, SessionOptions{TTL: time.Second})
	other := holdLock(t, session, "c")
	sent := time.Now()
	lease, err := session.Acquire(context.Background(), "a", LockOptions{MoreNames: []string{"b"}, MaxHold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	holdsAll(t, conn, port, lease.Token, lease.Fences, "a", "b")
	lostAlone(t, lease, other, "", 3*time.Second)
	if !errors.Is(lease.Err(), LostMaxHold) || time.Since(sent) < time.Second || session.Err() != nil {
		t.Fatalf("lost %v after the acquire was sent: %v (the session's %v)", time.Since(sent), lease.Err(), session.Err())
	}
}
