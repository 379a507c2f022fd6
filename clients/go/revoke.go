// The operator's hand on a lock or an election: ending a holding by force.

package leasehold

import (
	"context"

	"google.golang.org/grpc"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// Revoke ends holdings of the lock `name` by force, for an operator who must clear a lock whose
// holder is stuck: the one holding it with fencingToken (a permit of a semaphore, one reader of
// a shared lock), or every holder with fencingToken 0. It returns the holdings it ended, as they
// were just before; none (nothing held, or nothing with that fencing token) is no error.
//
// Each revoked holder hears at once, on whichever server carries its stream: its Lost closes,
// and its Err is a *LostError for which errors.Is(err, LostRevoked) holds; it is not resumed.
// Its key goes, so the next waiter gets the lock at once, with a larger fencing token. A holder
// may act on its lock until it hears: the fencing token alone protects the resource meanwhile.
//
// With authentication on it needs the admin role on the name (else a *Refusal,
// PERMISSION_DENIED); with it off anyone may revoke, as anyone may acquire.
func Revoke(ctx context.Context, conn grpc.ClientConnInterface, name string, fencingToken uint64) ([]LockHolder, error) {
	answer, err := pb.NewLockServiceClient(conn).Revoke(ctx, &pb.RevokeRequest{Name: name, FencingToken: fencingToken})
	if err != nil {
		return nil, refusal(err)
	}
	return lockHolders(answer.Revoked), nil
}

// RevokeLeader ends the leadership of `election` by force, as Revoke ends a lock's holding: the
// leader of that term, or whichever leads with term 0. It returns the leader it ended, or nil
// when none was (no leader, or another term leads), which is no error. The leader hears at once
// (Candidate.Err, SessionLeader.Err: errors.Is(err, LostRevoked)), is not resumed, and the next
// candidate in line is elected with a larger term. It needs the admin role on the election, as
// Revoke does on a name.
func RevokeLeader(ctx context.Context, conn grpc.ClientConnInterface, election string, term uint64) (*Leader, error) {
	answer, err := pb.NewElectionServiceClient(conn).Revoke(ctx, &pb.ElectionServiceRevokeRequest{Election: election, Term: term})
	if err != nil || !answer.Revoked {
		return nil, refusal(err)
	}
	return &Leader{Term: answer.Term, Value: answer.Value}, nil
}

// lockHolders are the wire's holders, in this package's units.
func lockHolders(holders []*pb.Holder) []LockHolder {
	var converted []LockHolder
	for _, holder := range holders {
		converted = append(converted, LockHolder{
			Holder: holder.Holder, TTLRemaining: fromMillis(holder.TtlRemainingMs), FencingToken: holder.FencingToken,
		})
	}
	return converted
}
