// Following a lock's state as it changes, for an operator's console or a script.

package leasehold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// LockState is one state of a lock, as Watch reports it.
type LockState struct {
	Held         bool
	Holder       string        // the first holder's description (Options.Holder); "" when free
	TTLRemaining time.Duration // the first holder's remaining time to live in Redis
	FencingToken uint64        // the first holder's (the oldest) fencing token; 0 when free
	// Holders is every holder: one for a plain lock, each permit of a semaphore, each reader of
	// a shared lock, oldest fencing token first.
	Holders []LockHolder
	Limit   uint32 // the limit the holders asked for (1 for a plain lock or shared holders)
	Shared  bool   // held by readers (Options.Shared), not exclusively
	Waiting uint32 // how many wait for the name now
}

// ErrWatchEnded: the server ended a watch's stream without an error (Watch yields an error
// that wraps it and io.EOF).
var ErrWatchEnded = errors.New("leasehold: watch stream ended")

// reopenFor bounds how long a watch whose server went away tries to watch again through another
// (or the same one back) before it ends with the error, as the Rust client's followers do.
const reopenFor = 25 * time.Second

// Watch follows the lock `name`: ranging over it yields the state at once, then again on every
// change (taken, released, expired, revoked, a waiter joining or leaving), never the same state
// twice in a row (the time left is not part of a state). The server learns of changes from
// Redis pub/sub, not by polling; changes closer together than a round trip to Redis may come as
// one (the newest), and a reader slower than the changes is given the newest state, not every
// one it missed.
//
//	for state, err := range leasehold.Watch(ctx, conn, "nightly-report") {
//		if err != nil { ... } // the last pair: the watch could not go on
//		fmt.Println(state.Held, state.Holder, state.FencingToken, state.Waiting)
//	}
//
// It is an iterator rather than a channel (as Observe's, which predates range over functions)
// so that breaking out of the loop ends the stream, with no goroutine left to stop and no
// context to cancel for it. Each range opens a stream of its own.
//
// When its server stops or the connection fails (UNAVAILABLE), the watch goes on through
// another server the connection reaches, or the same one back, trying for about 25 s; the
// state it then starts with is skipped if it is the last one yielded. The sequence ends when
// ctx does, silently (ctx.Err() says so); when the watch cannot go on, its last pair carries
// the error: a *Refusal when the server answered with details (PERMISSION_DENIED without the
// observe role on the name), one that wraps ErrWatchEnded if the server ended the stream.
func Watch(ctx context.Context, conn grpc.ClientConnInterface, name string) iter.Seq2[*LockState, error] {
	return func(yield func(*LockState, error) bool) {
		var last *LockState
		var broke time.Time // when the stream broke, with no state since; zero while it works
		delay := firstBackoff
		for {
			stopped, err := watchOnce(ctx, conn, name, func(state *LockState) bool {
				broke, delay = time.Time{}, firstBackoff
				if last != nil && sameState(*last, *state) {
					return true // the state a reopened stream starts with, already yielded
				}
				last = state
				return yield(state, nil)
			})
			if stopped || ctx.Err() != nil {
				return // the caller's break or end, not the stream's failure
			}
			if broke.IsZero() {
				broke = time.Now()
			}
			if status.Code(err) != codes.Unavailable || time.Since(broke) > reopenFor {
				if errors.Is(err, io.EOF) {
					err = fmt.Errorf("%w: %w", ErrWatchEnded, io.EOF)
				}
				yield(nil, refusal(err))
				return
			}
			select {
			case <-time.After(jitter(delay)):
				delay = min(2*delay, maxBackoff)
			case <-ctx.Done():
				return
			}
		}
	}
}

// watchOnce watches on one stream, giving each state to yield, until yield says stop (true) or
// the stream ends (its error).
func watchOnce(ctx context.Context, conn grpc.ClientConnInterface, name string, yield func(*LockState) bool) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a break (or the end) ends the stream
	stream, err := pb.NewLockServiceClient(conn).Watch(ctx, &pb.WatchRequest{Name: name})
	for err == nil {
		var msg *pb.WatchResponse
		if msg, err = stream.Recv(); err == nil && !yield(lockState(msg.State)) {
			return true, nil
		}
	}
	return false, err
}

// sameState: the same holders hold with the same fencing tokens, in the same mode, with as many
// waiting (the time left is not part of a state).
func sameState(a, b LockState) bool {
	if a.Held != b.Held || a.Holder != b.Holder || a.FencingToken != b.FencingToken || a.Limit != b.Limit ||
		a.Shared != b.Shared || a.Waiting != b.Waiting || len(a.Holders) != len(b.Holders) {
		return false
	}
	for i := range a.Holders {
		if a.Holders[i].Holder != b.Holders[i].Holder || a.Holders[i].FencingToken != b.Holders[i].FencingToken {
			return false
		}
	}
	return true
}

// lockState is a state the server described, in this package's units.
func lockState(state *pb.DescribeResponse) *LockState {
	return &LockState{
		Held: state.GetHeld(), Holder: state.GetHolder(), TTLRemaining: fromMillis(state.GetTtlRemainingMs()),
		FencingToken: state.GetFencingToken(), Holders: lockHolders(state.GetHolders()), Limit: state.GetLimit(),
		Shared: state.GetMode() == pb.LeaseMode_LEASE_MODE_SHARED, Waiting: state.GetWaiting(),
	}
}
