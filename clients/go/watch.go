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

// Watch follows the lock `name`: ranging over it yields the state at once, then again on every
// change (taken, released, expired, revoked, a waiter joining or leaving), never the same state
// twice in a row. The server learns of changes from Redis pub/sub, not by polling; a reader
// slower than the changes is given the newest state, not every one it missed.
//
//	for state, err := range leasehold.Watch(ctx, conn, "nightly-report") {
//		if err != nil { ... } // the last pair: the stream failed
//		fmt.Println(state.Held, state.Holder, state.FencingToken, state.Waiting)
//	}
//
// It is an iterator rather than a channel (as Observe's, which predates range over functions)
// so that breaking out of the loop ends the stream, with no goroutine left to stop and no
// context to cancel for it. The sequence also ends when ctx does, silently (ctx.Err() says so);
// when the stream fails (the server refused, went away or shut down) its last pair carries the
// error: a *Refusal when the server answered with details (PERMISSION_DENIED without the
// observe role on the name). It does not resume on another server by itself: range over it
// again to watch on, from the state then. Each range opens a stream of its own.
func Watch(ctx context.Context, conn grpc.ClientConnInterface, name string) iter.Seq2[*LockState, error] {
	return func(yield func(*LockState, error) bool) {
		streamCtx, cancel := context.WithCancel(ctx)
		defer cancel() // a break (or the end) ends the stream
		stream, err := pb.NewLockServiceClient(conn).Watch(streamCtx, &pb.WatchRequest{Name: name})
		for err == nil {
			var msg *pb.WatchResponse
			if msg, err = stream.Recv(); err == nil && !yield(lockState(msg.State), nil) {
				return
			}
		}
		if ctx.Err() != nil {
			return // the caller's end, not the stream's failure
		}
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: %w", ErrWatchEnded, io.EOF)
		}
		yield(nil, refusal(err))
	}
}

// lockState is a state the server described, in this package's units.
func lockState(state *pb.DescribeResponse) *LockState {
	return &LockState{
		Held: state.GetHeld(), Holder: state.GetHolder(), TTLRemaining: fromMillis(state.GetTtlRemainingMs()),
		FencingToken: state.GetFencingToken(), Holders: lockHolders(state.GetHolders()), Limit: state.GetLimit(),
		Shared: state.GetMode() == pb.LeaseMode_LEASE_MODE_SHARED, Waiting: state.GetWaiting(),
	}
}
