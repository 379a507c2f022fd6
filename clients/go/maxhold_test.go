package leasehold

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// A validity is believed no further than the ceiling (set once), and one that ran out there is
// lost for MAX_HOLD; without a max hold, or before the ceiling, as the server vouches.
func TestValidityIsCappedAtTheMaxHold(t *testing.T) {
	sent := time.Now()
	b := newBelief("lease")
	if got := b.vouched(sent.Add(time.Hour)); !got.Equal(sent.Add(time.Hour)) {
		t.Fatalf("no max hold: believed until %v", got.Sub(sent))
	}
	b.capAt(sent, time.Second)
	b.capAt(sent.Add(time.Minute), time.Second) // asked again: the first stays
	if got := b.vouched(sent.Add(5 * time.Second)); !got.Equal(sent.Add(time.Second)) || !b.ValidUntil().Equal(got) {
		t.Fatalf("believed until %v past the acquire", got.Sub(sent))
	}
	if reason, message := b.ranOut(LostUnreachable, "server silent"); reason != LostMaxHold || message != "the lease reached its max hold (MaxHold)" {
		t.Fatalf("ran out at the ceiling: %v %q", reason, message)
	}
	if got := b.vouched(sent.Add(500 * time.Millisecond)); !got.Equal(sent.Add(500 * time.Millisecond)) {
		t.Fatalf("believed until %v", got.Sub(sent))
	}
	if reason, message := b.ranOut(LostUnreachable, "server silent"); reason != LostUnreachable || message != "server silent" {
		t.Fatalf("ran out before the ceiling: %v %q", reason, message)
	}
	if LostMaxHold.String() != "max_hold" || int32(LostMaxHold) != int32(pb.LostReason_LOST_REASON_MAX_HOLD) {
		t.Fatal("LostMaxHold is not the wire's")
	}
}

// A lease whose server vouches past its max hold is believed only until then by this process's
// clock, and lost for MAX_HOLD then; it is not resumed.
func TestALeaseAtItsMaxHoldIsLostByItsOwnClock(t *testing.T) {
	conn, locks, _ := serveFakes(t)
	sent := time.Now()
	maxHold := 300 * time.Millisecond
	lease, _ := heldOnFake(t, conn, locks, Options{TTL: 10 * time.Second, MaxHold: maxHold})
	acquired := time.Now()
	if until := lease.ValidUntil(); until.After(acquired.Add(maxHold)) || until.Before(sent.Add(maxHold)) {
		t.Fatalf("believed until %v after the acquire was sent", until.Sub(sent))
	}
	within(t, lease.Lost(), "Lost() never closed")
	if lostAt := time.Now(); lostAt.Before(sent.Add(maxHold)) || !errors.Is(lease.Err(), LostMaxHold) {
		t.Fatalf("lost %v after the acquire was sent: %v", lostAt.Sub(sent), lease.Err())
	}
	locks.ends <- nil
	if held, _ := lease.Release(); held {
		t.Fatal("released a lease that was lost")
	}
	notResumed(t, locks)
}

// A session's lease at its max hold is lost alone, for MAX_HOLD, by this process's clock, and
// let go on the server.
func TestASessionLeaseAtItsMaxHoldIsLostAlone(t *testing.T) {
	session, stream, _ := openFake(t)
	kept, keptFailed := inBackground(func() (*SessionLease, error) {
		return session.Acquire(context.Background(), "b", LockOptions{})
	})
	keptID := recv(t, stream).GetAcquire().GetId()
	sendEvent(t, stream, acquiredEvent(keptID, 2, 10_000, 0))
	b := awaitHeld(t, kept, keptFailed, 2*time.Second, "b not acquired")
	sent := time.Now()
	leases, failed := inBackground(func() (*SessionLease, error) {
		return session.Acquire(context.Background(), "a", LockOptions{MaxHold: 300 * time.Millisecond})
	})
	id := recv(t, stream).GetAcquire().GetId()
	sendEvent(t, stream, acquiredEvent(id, 4, 10_000, 0))
	a := awaitHeld(t, leases, failed, 2*time.Second, "a not acquired")
	if until := a.ValidUntil(); until.After(time.Now().Add(300 * time.Millisecond)) {
		t.Fatalf("believed until %v after the acquire was sent", until.Sub(sent))
	}
	lostAlone(t, a, b, "max hold", 2*time.Second)
	if !errors.Is(a.Err(), LostMaxHold) || time.Since(sent) < 300*time.Millisecond {
		t.Fatalf("lost %v after the acquire was sent: %v", time.Since(sent), a.Err())
	}
	if release := recv(t, stream).GetRelease(); release == nil || release.Id != id {
		t.Fatalf("expected its release, got %v", release)
	}
}
