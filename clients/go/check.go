// The protected resource's question: is this fencing token still the lock's holding?

package leasehold

import (
	"context"

	"google.golang.org/grpc"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// TokenState is what a fencing token is to its name now, as Check answers. The values are the
// wire's (leaseholdpb.TokenState).
type TokenState int32

const (
	// TokenUnspecified: a server that predates the answer.
	TokenUnspecified TokenState = TokenState(pb.TokenState_TOKEN_STATE_UNSPECIFIED)
	// TokenCurrent: a live holding of the name has this fencing token.
	TokenCurrent TokenState = TokenState(pb.TokenState_TOKEN_STATE_CURRENT)
	// TokenSuperseded: the name is held, under other fencing tokens only.
	TokenSuperseded TokenState = TokenState(pb.TokenState_TOKEN_STATE_SUPERSEDED)
	// TokenFree: nobody holds the name.
	TokenFree TokenState = TokenState(pb.TokenState_TOKEN_STATE_FREE)
)

var tokenStateNames = map[TokenState]string{
	TokenUnspecified: "unspecified", TokenCurrent: "current", TokenSuperseded: "superseded", TokenFree: "free",
}

func (s TokenState) String() string { return nameOf(tokenStateNames, s, "TokenState") }

// TokenCheck is Check's answer.
type TokenCheck struct {
	State TokenState
	// CurrentFencingToken is the current holder's (the oldest, for several holders) when
	// TokenCurrent or TokenSuperseded; 0 when TokenFree.
	CurrentFencingToken uint64
}

// Check asks whether fencingToken is the current holding of the lock `name` (Chubby's
// CheckSequencer): one Redis read on the server, cheap enough for the protected resource to
// call before each write it is given with a fencing token.
//
//	check, err := leasehold.Check(ctx, conn, "nightly-report", fencingToken)
//	if err != nil || check.State != leasehold.TokenCurrent { ... refuse the write ... }
//
// A check is not a conditional write: the holding can end between the answer and the write, so
// a resource that must never take a stale write fences itself (docs/contract.md). With
// authentication on it needs the observe role on the name.
func Check(ctx context.Context, conn grpc.ClientConnInterface, name string, fencingToken uint64) (*TokenCheck, error) {
	answer, err := pb.NewLockServiceClient(conn).Check(ctx, &pb.CheckRequest{Name: name, FencingToken: fencingToken})
	if err != nil {
		return nil, refusal(err)
	}
	return &TokenCheck{State: TokenState(answer.State), CurrentFencingToken: answer.CurrentFencingToken}, nil
}
