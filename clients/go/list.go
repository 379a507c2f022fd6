package leasehold

import (
	"context"
	"time"

	"google.golang.org/grpc"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// HeldLock is one lock held now, as List reports it. Holder, TTLRemaining and FencingToken
// describe the first of its holders (the oldest fencing token).
type HeldLock struct {
	Name         string
	Holder       string        // the holder's description (Options.Holder)
	TTLRemaining time.Duration // its remaining time to live in Redis
	FencingToken uint64
	// Holders is every holder: one for a plain lock, each permit of a semaphore, each reader of
	// a shared lock, oldest fencing token first.
	Holders []LockHolder
	Limit   uint32 // the limit the holders asked for (1 for a plain lock or shared holders)
	Shared  bool   // held by readers (Options.Shared), not exclusively
	Waiting uint32 // how many wait for the name now (0 from a server that predates it)
}

// LockHolder is one holder of a lock.
type LockHolder struct {
	Holder       string // the holder's description (Options.Holder)
	TTLRemaining time.Duration
	FencingToken uint64
}

// Listing is List's answer: the locks held, and whether more are held than it returned.
type Listing struct {
	Locks     []HeldLock // in no particular order
	Truncated bool
}

// List returns the locks held now under the server's key prefix, at most limit of them (0: the
// server's maximum, 1,000); Truncated says whether more are held. It is a bounded scan, not a
// snapshot: a lock taken or released meanwhile may or may not appear. With authentication on
// (the server's --auth-file) it needs an admin grant (else PERMISSION_DENIED, a *Refusal with
// reason NOT_GRANTED) and shows only the names the grant covers.
//
// Like CurrentLeader it answers with this package's types rather than the generated
// leaseholdpb.ListResponse, so that callers need neither the stubs nor the wire's units.
func List(ctx context.Context, conn grpc.ClientConnInterface, limit uint32) (*Listing, error) {
	answer, err := pb.NewLockServiceClient(conn).List(ctx, &pb.ListRequest{Limit: limit})
	if err != nil {
		return nil, refusal(err)
	}
	listing := &Listing{Truncated: answer.Truncated, Locks: make([]HeldLock, 0, len(answer.Locks))}
	for _, lock := range answer.Locks {
		listing.Locks = append(listing.Locks, HeldLock{
			Name: lock.Name, Holder: lock.Holder, TTLRemaining: fromMillis(lock.TtlRemainingMs),
			FencingToken: lock.FencingToken, Holders: lockHolders(lock.Holders), Limit: lock.Limit,
			Shared: lock.Mode == pb.LeaseMode_LEASE_MODE_SHARED, Waiting: lock.Waiting,
		})
	}
	return listing, nil
}

func fromMillis(ms uint32) time.Duration { return time.Duration(ms) * time.Millisecond }
