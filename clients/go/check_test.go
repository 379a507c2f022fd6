package leasehold

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// Check asks for the name and fencing token it is given and answers each state in this
// package's type; a refusal is a *Refusal.
func TestCheckAsksAndAnswersEachState(t *testing.T) {
	conn, locks, _ := serveFakes(t)
	ctx := context.Background()
	for _, c := range []struct {
		answer *pb.CheckResponse
		want   TokenCheck
	}{
		{&pb.CheckResponse{State: pb.TokenState_TOKEN_STATE_CURRENT, CurrentFencingToken: 7}, TokenCheck{TokenCurrent, 7}},
		{&pb.CheckResponse{State: pb.TokenState_TOKEN_STATE_SUPERSEDED, CurrentFencingToken: 9}, TokenCheck{TokenSuperseded, 9}},
		{&pb.CheckResponse{State: pb.TokenState_TOKEN_STATE_FREE}, TokenCheck{TokenFree, 0}},
		{&pb.CheckResponse{}, TokenCheck{TokenUnspecified, 0}},
	} {
		locks.check = func(request *pb.CheckRequest) (*pb.CheckResponse, error) {
			if request.Name != "job" || request.FencingToken != 7 {
				t.Errorf("asked %v", request)
			}
			return c.answer, nil
		}
		if got, err := Check(ctx, conn, "job", 7); err != nil || *got != c.want {
			t.Fatalf("answered %v: %+v %v", c.answer, got, err)
		}
	}
	locks.check = func(*pb.CheckRequest) (*pb.CheckResponse, error) {
		return nil, status.Error(codes.Aborted, "no")
	}
	var refusal *Refusal
	if got, err := Check(ctx, conn, "job", 7); got != nil || !errors.As(err, &refusal) || refusal.Code != codes.Aborted {
		t.Fatalf("refused: %+v %v", got, err)
	}
	if TokenSuperseded.String() != "superseded" || TokenState(9).String() != "TokenState(9)" ||
		int32(TokenFree) != int32(pb.TokenState_TOKEN_STATE_FREE) {
		t.Fatal("names or values")
	}
}
