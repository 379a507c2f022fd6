// A session's stream, and a new one when it breaks: resumption with backoff within the grace,
// every lease asked for again on the new stream.

package leasehold

import (
	"context"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// sessionAttempt is how an attempt to open a new stream went.
type sessionAttempt struct {
	att *sessionStream
	err error
}

// broke: the stream ended without `closed` or `lost`. A resumable session opens a new one
// (after a backoff), until its grace or its leases' validity runs out.
func (s *Session) broke(err error) {
	s.att.cancel()
	s.att = nil
	s.closeSent = false
	if !s.resume || !transient(err) {
		s.loseSession(streamEnded(s.streamCtx, err), "session stream ended: "+describe(err), err)
		return
	}
	s.lastErr = err
	for _, e := range s.entries {
		e.sent, e.confirmed = false, false
		// The resume publishes the latest value asked for.
		e.covered = append(e.covered, e.proclaimed...)
		e.proclaimed = nil
		for _, asked := range e.unsent {
			e.covered = append(e.covered, asked.reply)
		}
		e.unsent = nil
	}
	if s.resumeBy.IsZero() {
		by := time.Now().Add(s.grace)
		for _, e := range s.entries {
			if until := e.hold.ValidUntil(); e.held && until.After(by) {
				by = until
			}
		}
		s.resumeBy, s.resumeByC = by, time.After(time.Until(by))
	}
	s.retry()
}

func (s *Session) retry() {
	s.retryC = time.After(jitter(s.backoff))
	s.backoff = min(2*s.backoff, maxBackoff)
}

// attempt opens a new stream on a goroutine of its own (the connection may take a while).
func (s *Session) attempt() {
	go func() {
		att, err := openSessionStream(s.streamCtx, s.conn, s.open)
		s.attempts <- sessionAttempt{att, err}
	}()
}

// attached: a new stream is open (the same `open` sent), or could not be. Every lease is asked
// for on it, in the order they were first asked for.
func (s *Session) attached(a sessionAttempt) {
	if a.err != nil {
		if !transient(a.err) {
			s.loseSession(refusedResume(a.err), "could not resume the session: "+describe(a.err), a.err)
			return
		}
		s.lastErr = a.err
		s.retry()
		return
	}
	s.att = a.att
	ids := make([]uint64, 0, len(s.entries))
	for id := range s.entries {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		s.sendEntry(s.entries[id])
	}
}

// sessionStream is one Session stream: read by a goroutine of its own, and written by another
// from a queue, so that the session's goroutine never waits on the network.
type sessionStream struct {
	reader[*pb.SessionResponse]
	cancel context.CancelFunc
	opened time.Time // just before the stream was opened: what valid_to_ms counts from

	mu    sync.Mutex
	queue []*pb.SessionRequest
	wake  chan struct{}
}

// openSessionStream opens a Session stream in ctx and sends `open` on it.
func openSessionStream(ctx context.Context, conn grpc.ClientConnInterface, open *pb.SessionOpen) (*sessionStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	opened := time.Now() // valid_to_ms counts from the server's receipt of open, which is later
	stream, err := pb.NewSessionServiceClient(conn).Session(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	att := &sessionStream{reader: read(ctx, stream.Recv), cancel: cancel, opened: opened, wake: make(chan struct{}, 1)}
	att.send(&pb.SessionRequest{Action: &pb.SessionRequest_Open{Open: open}})
	go att.write(ctx, stream)
	return att, nil
}

// send queues a request.
func (a *sessionStream) send(request *pb.SessionRequest) {
	a.mu.Lock()
	a.queue = append(a.queue, request)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// write sends the queued requests in order until the stream ends (a failed send ends it: its
// reader says how).
func (a *sessionStream) write(ctx context.Context, stream pb.SessionService_SessionClient) {
	for {
		select {
		case <-a.wake:
		case <-ctx.Done():
			return
		}
		a.mu.Lock()
		batch := a.queue
		a.queue = nil
		a.mu.Unlock()
		for _, request := range batch {
			if err := stream.Send(request); err != nil {
				return
			}
		}
	}
}
