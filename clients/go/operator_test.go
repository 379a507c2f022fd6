package leasehold

import (
	"context"
	"errors"
	"io"
	"iter"
	"reflect"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// Revoke and RevokeLeader ask for what they are given and answer in this package's types; none
// revoked is nil, and no error.
func TestRevokeAsksAndAnswersInThisPackagesTypes(t *testing.T) {
	conn, locks, elections := serveFakes(t)
	ctx := context.Background()
	locks.revoked = []*pb.Holder{{Holder: "host-a", TtlRemainingMs: 1500, FencingToken: 7}}
	revoked, err := Revoke(ctx, conn, "job", 7)
	if err != nil || !reflect.DeepEqual(revoked, []LockHolder{{Holder: "host-a", TTLRemaining: 1500 * time.Millisecond, FencingToken: 7}}) {
		t.Fatalf("revoked %+v, %v", revoked, err)
	}
	if asked := <-locks.revokes; asked.Name != "job" || asked.FencingToken != 7 {
		t.Fatalf("asked %v", asked)
	}
	locks.revoked = nil
	if revoked, err := Revoke(ctx, conn, "job", 0); revoked != nil || err != nil {
		t.Fatalf("nothing held: %+v, %v", revoked, err)
	}
	elections.revoked = &pb.ElectionServiceRevokeResponse{Revoked: true, Value: []byte("a"), Term: 9}
	if leader, err := RevokeLeader(ctx, conn, "vote", 0); err != nil || leader == nil || leader.Term != 9 || string(leader.Value) != "a" {
		t.Fatalf("revoked leader %+v, %v", leader, err)
	}
	if asked := <-elections.revokes; asked.Election != "vote" || asked.Term != 0 {
		t.Fatalf("asked %v", asked)
	}
	elections.revoked = &pb.ElectionServiceRevokeResponse{}
	if leader, err := RevokeLeader(ctx, conn, "vote", 3); leader != nil || err != nil {
		t.Fatalf("no leader: %+v, %v", leader, err)
	}
}

// A watch yields each state the server sends, in this package's types; breaking out of the
// loop ends its stream.
func TestWatchYieldsEachStateAndABreakEndsTheStream(t *testing.T) {
	conn, locks, _ := serveFakes(t)
	streamEnded := make(chan struct{})
	locks.watch = func(request *pb.WatchRequest, stream pb.LockService_WatchServer) error {
		defer close(streamEnded)
		for _, state := range []*pb.DescribeResponse{
			{},
			{Held: true, Holder: "r1", TtlRemainingMs: 900, FencingToken: 4, Limit: 1, Mode: pb.LeaseMode_LEASE_MODE_SHARED, Waiting: 2,
				Holders: []*pb.Holder{{Holder: "r1", TtlRemainingMs: 900, FencingToken: 4}, {Holder: "r2", TtlRemainingMs: 950, FencingToken: 5}}},
		} {
			if err := stream.Send(&pb.WatchResponse{State: state}); err != nil {
				return err
			}
		}
		<-stream.Context().Done()
		return nil
	}
	var states []*LockState
	for state, err := range Watch(context.Background(), conn, "job") {
		if err != nil {
			t.Fatal(err)
		}
		if states = append(states, state); len(states) == 2 {
			break
		}
	}
	want := []*LockState{{}, {
		Held: true, Holder: "r1", TTLRemaining: 900 * time.Millisecond, FencingToken: 4, Limit: 1, Shared: true, Waiting: 2,
		Holders: []LockHolder{{"r1", 900 * time.Millisecond, 4}, {"r2", 950 * time.Millisecond, 5}},
	}}
	if !reflect.DeepEqual(states, want) {
		t.Fatalf("states %+v", states)
	}
	within(t, streamEnded, "the break left the stream open")
}

// A watch the server refuses, or whose stream the server ends, ends with that error; one whose
// context ends, silently.
func TestWatchEndsWithTheStreamsErrorOrSilentlyWithItsContext(t *testing.T) {
	conn, locks, _ := serveFakes(t)
	locks.watch = func(*pb.WatchRequest, pb.LockService_WatchServer) error {
		return withDetails(t, codes.PermissionDenied, "no observe role on job",
			&errdetails.ErrorInfo{Reason: "NOT_GRANTED", Domain: ErrorDomain}).Err()
	}
	var refused *Refusal
	if states, err := collect(Watch(context.Background(), conn, "job")); len(states) != 0 ||
		!errors.As(err, &refused) || refused.Reason != "NOT_GRANTED" {
		t.Fatalf("refused: %v %v", states, err)
	}
	locks.watch = func(_ *pb.WatchRequest, stream pb.LockService_WatchServer) error {
		return stream.Send(&pb.WatchResponse{State: &pb.DescribeResponse{}})
	}
	if states, err := collect(Watch(context.Background(), conn, "job")); len(states) != 1 ||
		!errors.Is(err, ErrWatchEnded) || !errors.Is(err, io.EOF) {
		t.Fatalf("ended by the server: %v %v", states, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	locks.watch = func(_ *pb.WatchRequest, stream pb.LockService_WatchServer) error {
		if err := stream.Send(&pb.WatchResponse{State: &pb.DescribeResponse{}}); err != nil {
			return err
		}
		cancel()
		<-stream.Context().Done()
		return nil
	}
	if states, err := collect(Watch(ctx, conn, "job")); len(states) > 1 || err != nil {
		t.Fatalf("cancelled: %v %v", states, err)
	}
}

// collect ranges over a watch to its end: the states, and the error it ended with.
func collect(watch iter.Seq2[*LockState, error]) ([]*LockState, error) {
	var states []*LockState
	for state, err := range watch {
		if err != nil {
			return states, err
		}
		states = append(states, state)
	}
	return states, nil
}

// watching is a watch ranged over in the background, read by a test one state at a time.
type watching struct {
	states chan *LockState
	failed chan error
	last   *LockState
}

// watchInBackground ranges over Watch(ctx, conn, name) until ctx ends.
func watchInBackground(ctx context.Context, conn grpc.ClientConnInterface, name string) *watching {
	w := &watching{states: make(chan *LockState, 16), failed: make(chan error, 1)}
	go func() {
		for state, err := range Watch(ctx, conn, name) {
			if err != nil {
				w.failed <- err
				return
			}
			select {
			case w.states <- state:
			case <-ctx.Done():
				return
			}
		}
	}()
	return w
}

// next is the next state reported, within 2 s; it fails the test if the watch failed, or if
// the state is the one before again (its time to live aside, which a reader sees go down).
func (w *watching) next(t *testing.T) *LockState {
	t.Helper()
	select {
	case state := <-w.states:
		if w.last != nil && sameState(*w.last, *state) {
			t.Fatalf("reported twice in a row: %+v", state)
		}
		w.last = state
		return state
	case err := <-w.failed:
		t.Fatalf("the watch failed: %v", err)
	case <-time.After(2 * time.Second):
		t.Fatalf("no change reported within 2 s after %+v", w.last)
	}
	panic("unreachable")
}
