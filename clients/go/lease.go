// Package leasehold holds Leasehold locks from Go, over the Lease stream, or many of them on one
// Session stream.
//
//	conn, _ := leasehold.Dial("10.0.0.1:50051,10.0.0.2:50051", leasehold.DialOptions{})
//	lease, err := leasehold.Acquire(ctx, conn, "nightly-report", leasehold.Options{TTL: 10 * time.Second})
//	if err != nil { ... } // errors.Is(err, leasehold.ErrNotAcquired) when the lock stays taken
//	defer lease.Release()
//	select {
//	case <-lease.Lost(): // stop work: lease.LostReason() says why
//	case <-work(lease.FencingToken):
//	}
//
// A held lease outlives its server: when its stream breaks (the server shut down for a deploy,
// crashed, or the connection failed) the lease is resumed on a server that answers, with the
// same token and fencing token, without a word to the caller. Options.NoResume turns that off.
//
// Lost() is closed when the server says the lease is lost, when the stream breaks and the lease
// cannot be resumed (or resumption is off), or when the validity the server last confirmed runs
// out by this process's clock.
//
// A process that holds many locks (one per shard, per customer, per job) holds them on one
// Session instead, as etcd's concurrency package hangs mutexes and elections on one session:
// one stream, renewed and confirmed as one, resumed as one when its server goes away.
//
//	session, _ := leasehold.NewSession(ctx, conn, leasehold.SessionOptions{TTL: 10 * time.Second})
//	defer session.Close() // releases every lease still held on it
//	lease, err := session.Acquire(ctx, "shard-7", leasehold.LockOptions{Wait: time.Second})
//	if err != nil { ... } // the errors Acquire gives: ErrNotAcquired, *Refusal
//	defer lease.Release()
//	select {
//	case <-lease.Lost(): // this lease alone (lease.LostReason()); session.Lost() for all of them
//	case <-work(lease.FencingToken):
//	}
//	leader, err := session.Campaign(ctx, "scheduler", []byte("host-a")) // waits until it leads
//
// An error the server answers with its details is a *Refusal: the reason (LOCK_HELD,
// WAIT_EXPIRED, ...), the holder, when to retry and the other named values, as fields
// (errors.As), never to be parsed from the message.
package leasehold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// Options of one lease.
type Options struct {
	TTL    time.Duration // default 30s
	Wait   time.Duration // 0: fail at once
	Holder string        // shown to others who find the lock taken
	// Limit lets up to that many leases hold the name at once (a semaphore; 0 or 1: a plain
	// lock). Every holder of one name must give the same limit (else FAILED_PRECONDITION).
	Limit uint32
	// Shared holds the name with other shared leases (readers); an exclusive one (a writer)
	// waits for them all, and readers that come after a waiting writer wait behind it.
	Shared bool
	// ResumeGrace keeps the lease that long (at most TTL) after the stream breaks or its server
	// shuts down, so that it can be resumed. Default: TTL, or 0 with NoResume (the server then
	// releases the lease the moment its stream ends).
	ResumeGrace time.Duration
	// ResumeToken reattaches to the lease this token holds instead of taking a new one
	// (NOT_FOUND once it is gone).
	ResumeToken string
	// NoResume turns automatic resumption off for this lease: a broken stream ends it as lost,
	// as a server shutting down does, and ResumeGrace is only what is given.
	NoResume bool
}

// Lease is a held lock.
type Lease struct {
	FencingToken uint64
	Token        string

	conn    grpc.ClientConnInterface
	ctx     context.Context // every stream of the lease lives under it: the caller's context
	stop    context.CancelFunc
	name    string
	ttlMs   uint32
	graceMs uint32
	resume  bool

	belief // Lost, LostReason, ValidUntil

	done         chan struct{} // the lease's goroutine ended: released, or lost and let go
	releaseAsked chan struct{}
	releaseOnce  sync.Once

	mu         sync.Mutex // guards how the release went
	wasHeld    bool
	releaseErr error
}

// Lease streams, resumption and release between streams are bounded by these.
const (
	releaseTimeout = 10 * time.Second
	firstBackoff   = 20 * time.Millisecond
	maxBackoff     = 500 * time.Millisecond
)

// Acquire takes the lock `name`, waiting up to opts.Wait. Cancelling ctx releases the lease.
// When the lock stays taken the error is a *Refusal (reason LOCK_HELD or WAIT_EXPIRED, the
// holder, when to retry) for which errors.Is(err, ErrNotAcquired) holds. An `acquired` that
// arrives after the validity it gives has run out (held up on its way) is no lease: the error
// then satisfies errors.Is(err, ErrStale).
func Acquire(ctx context.Context, conn *grpc.ClientConn, name string, opts Options) (*Lease, error) {
	if opts.TTL == 0 {
		opts.TTL = 30 * time.Second
	}
	grace := opts.ResumeGrace
	if grace == 0 && !opts.NoResume {
		grace = opts.TTL
	}
	ctx, stop := context.WithCancel(ctx)
	l := &Lease{
		conn: conn, ctx: ctx, stop: stop, name: name,
		ttlMs: millis(opts.TTL), graceMs: millis(grace), resume: !opts.NoResume,
		belief: newBelief(), done: make(chan struct{}), releaseAsked: make(chan struct{}),
	}
	streamCtx, cancel := context.WithCancel(ctx)
	att, acquired, err := l.attach(streamCtx, cancel, &pb.LeaseAcquire{
		Name: name, TtlMs: l.ttlMs, WaitMs: millis(opts.Wait), Holder: opts.Holder,
		Limit: opts.Limit, Mode: mode(opts.Shared), ResumeGraceMs: l.graceMs, ResumeToken: opts.ResumeToken,
	}, time.Time{})
	if err != nil {
		stop()
		return nil, refusal(err)
	}
	l.FencingToken, l.Token = acquired.FencingToken, acquired.Token
	go l.run(att)
	return l, nil
}

func millis(d time.Duration) uint32 { return uint32(d.Milliseconds()) }

func mode(shared bool) pb.LeaseMode {
	if shared {
		return pb.LeaseMode_LEASE_MODE_SHARED
	}
	return pb.LeaseMode_LEASE_MODE_EXCLUSIVE
}

func (l *Lease) released(wasHeld bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wasHeld, l.releaseErr = wasHeld, refusal(err)
}

// reader reads a stream on a goroutine of its own: every message to events, then how the
// stream ended (one error) to failed. It stops when ctx ends.
type reader[T any] struct {
	events chan T
	failed chan error
}

func read[T any](ctx context.Context, recv func() (T, error)) reader[T] {
	r := reader[T]{events: make(chan T), failed: make(chan error, 1)}
	go func() {
		for {
			msg, err := recv()
			if err != nil {
				r.failed <- err
				return
			}
			select {
			case r.events <- msg:
			case <-ctx.Done():
				r.failed <- status.FromContextError(ctx.Err()).Err()
				return
			}
		}
	}()
	return r
}

// attachment is one Lease stream holding the lease.
type attachment struct {
	reader[*pb.LeaseResponse]
	stream pb.LockService_LeaseClient
	cancel context.CancelFunc
	opened time.Time // just before the stream was opened: what valid_to_ms counts from
}

// lostError: the server answered `lost` instead of `acquired`.
type lostError string

func (e lostError) Error() string { return string(e) }

// attach opens a Lease stream in ctx (which cancel ends), sends `request` and waits for
// `acquired` (until `until`, unless it is zero), which it returns with the stream, now read by
// a goroutine of its own. An `acquired` whose validity has already run out when it arrives is
// no lease: the stream is cancelled and the error is a staleError.
func (l *Lease) attach(ctx context.Context, cancel context.CancelFunc, request *pb.LeaseAcquire, until time.Time) (*attachment, *pb.Acquired, error) {
	if !until.IsZero() {
		// Not a deadline of the stream's context: a resumed stream lives on past it.
		expire := time.AfterFunc(time.Until(until), cancel)
		defer expire.Stop()
	}
	opened := time.Now() // valid_to_ms counts from the server's receipt, which is later
	stream, err := pb.NewLockServiceClient(l.conn).Lease(ctx)
	if err == nil {
		err = stream.Send(&pb.LeaseRequest{Action: &pb.LeaseRequest_Acquire{Acquire: request}})
		if errors.Is(err, io.EOF) {
			err = nil // the stream ended: Recv says how
		}
	}
	for err == nil {
		var msg *pb.LeaseResponse
		msg, err = stream.Recv()
		if err != nil {
			break
		}
		if acquired := msg.GetAcquired(); acquired != nil {
			received := time.Now()
			until := vouchedUntil(opened, received, acquired.ValidForMs, acquired.ValidToMs)
			if !until.After(received) {
				// Held up on its way (a healed partition): the lease may be someone else's by
				// now. Cancelling the stream lets go of it (or keeps it only for its grace).
				err = staleError("acquired, but the news arrived after its validity had run out")
				break
			}
			l.vouched(until)
			return &attachment{read(ctx, stream.Recv), stream, cancel, opened}, acquired, nil
		}
		if lost := msg.GetLost(); lost != nil {
			err = lostError(lost.Reason)
		}
	}
	cancel()
	return nil, nil, err
}

// run follows the lease until it is released or lost, resuming it when its stream breaks.
func (l *Lease) run(att *attachment) {
	defer close(l.done)
	defer l.stop()
	defer func() {
		if att != nil {
			att.cancel()
		}
	}()
	timer := time.NewTimer(time.Until(l.ValidUntil()))
	defer timer.Stop()
	var releaseAsked <-chan struct{} = l.releaseAsked
	releasing := false
	var sendErr error
	for {
		select {
		case msg := <-att.events:
			switch {
			case msg.GetExtended() != nil:
				extended := msg.GetExtended()
				l.vouched(vouchedUntil(att.opened, time.Now(), extended.ValidForMs, extended.ValidToMs))
				timer.Reset(time.Until(l.ValidUntil()))
			case msg.GetLost() != nil:
				l.lose(msg.GetLost().Reason)
			case msg.GetReleased() != nil:
				l.released(msg.GetReleased().WasHeld, nil)
				return
			}
		case err := <-att.failed:
			att.cancel()
			broken := l.resume && l.broken(err)
			switch {
			case l.isLost():
				l.released(false, sendErr)
				return
			case releasing && broken:
				l.released(l.releaseBetweenStreams())
				return
			case !broken:
				if l.resume && l.ctx.Err() != nil {
					// The caller cancelled: the server keeps a resumable lease whose stream
					// ends without a release (it cannot tell a cancel from a dead connection).
					l.releaseBestEffort()
				}
				l.lose("lease stream ended: " + describe(err))
				l.released(false, sendErr)
				return
			}
			var releaseNow bool
			att, releaseNow = l.resumeAfter(err, &releaseAsked)
			if att == nil {
				return
			}
			timer.Reset(time.Until(l.ValidUntil()))
			if releaseNow {
				releasing = true
				sendErr = l.sendRelease(att)
			}
		case <-timer.C:
			l.lose("no renewal confirmed before the lease ran out (server silent)")
		case <-releaseAsked:
			releaseAsked = nil
			releasing = true
			sendErr = l.sendRelease(att)
		}
	}
}

// sendRelease asks the server to release the lease; the stream then ends with `released`
// (or breaks, which run sees).
func (l *Lease) sendRelease(att *attachment) error {
	err := att.stream.Send(&pb.LeaseRequest{Action: &pb.LeaseRequest_Release{Release: &pb.LeaseRelease{}}})
	if err == nil {
		err = att.stream.CloseSend()
	}
	return err
}

// broken tells a stream that broke (resumable) from one that ended for good: the caller's
// cancellation, or an answer such as NOT_FOUND or PERMISSION_DENIED.
func (l *Lease) broken(err error) bool {
	return l.ctx.Err() == nil && transient(err)
}

func transient(err error) bool {
	var lost lostError
	if errors.As(err, &lost) || errors.Is(err, ErrStale) {
		return false // the server's answer, or one too late to believe: not a broken stream
	}
	if errors.Is(err, io.EOF) {
		return true // the stream ended without `released` or `lost`
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Unknown, codes.Internal, codes.Canceled, codes.DeadlineExceeded:
		return true
	}
	return false
}

// describe words an error for a lost reason.
func describe(err error) string {
	if errors.Is(err, io.EOF) {
		return "the stream ended"
	}
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return err.Error()
}

// jitter is a random wait between half the delay and the delay.
func jitter(delay time.Duration) time.Duration { return delay/2 + rand.N(delay/2+1) }

// resumeAfter reattaches the lease on a new stream (any server the connection reaches), trying
// again with backoff and jitter until the lease's validity runs out. It returns the new stream,
// and whether a release was asked for meanwhile (to send on it), or nil once the lease is lost
// or released.
func (l *Lease) resumeAfter(cause error, releaseAsked *<-chan struct{}) (*attachment, bool) {
	request := &pb.LeaseAcquire{Name: l.name, TtlMs: l.ttlMs, ResumeGraceMs: l.graceMs, ResumeToken: l.Token}
	last := cause
	delay := firstBackoff
	for {
		until := l.ValidUntil()
		if !time.Now().Before(until) {
			l.lose("could not resume before the lease's validity ran out: " + describe(last))
			return nil, false
		}
		type result struct {
			att      *attachment
			acquired *pb.Acquired
			err      error
		}
		attempt := make(chan result, 1)
		ctx, cancel := context.WithCancel(l.ctx)
		go func() {
			att, acquired, err := l.attach(ctx, cancel, request, until)
			attempt <- result{att, acquired, err}
		}()
		var r result
		releaseNow := false
		select {
		case r = <-attempt:
		case <-*releaseAsked:
			// Asked while the attempt is under way: give it a moment to finish (then release on
			// its stream), else abandon it and release by the token.
			*releaseAsked = nil
			releaseNow = true
			select {
			case r = <-attempt:
			case <-time.After(time.Second):
				cancel()
				r = <-attempt
			}
		}
		if r.err == nil {
			if r.acquired.FencingToken != l.FencingToken || r.acquired.Token != l.Token {
				r.att.cancel()
				l.lose(fmt.Sprintf("resumed with fencing token %d instead of %d", r.acquired.FencingToken, l.FencingToken))
				return nil, false
			}
			return r.att, releaseNow
		}
		if releaseNow {
			l.released(l.releaseBetweenStreams())
			return nil, false
		}
		if l.ctx.Err() != nil {
			l.lose("lease stream ended: " + l.ctx.Err().Error())
			l.releaseBestEffort()
			return nil, false
		}
		var lost lostError
		if errors.As(r.err, &lost) {
			l.lose(string(lost))
			return nil, false
		}
		if !transient(r.err) {
			l.lose("could not resume the lease: " + describe(r.err))
			return nil, false
		}
		if time.Now().Before(until) || status.Code(r.err) != codes.Canceled {
			last = r.err // else the attempt was cut at the validity: the error before says more
		}
		wait := time.NewTimer(min(jitter(delay), time.Until(until)))
		delay = min(2*delay, maxBackoff)
		select {
		case <-wait.C:
		case <-l.ctx.Done():
			wait.Stop()
		case <-*releaseAsked:
			wait.Stop()
			*releaseAsked = nil
			l.released(l.releaseBetweenStreams())
			return nil, false
		}
	}
}

// releaseBetweenStreams releases the lease by its token with the unary Release call, on any
// server the connection reaches, within releaseTimeout.
func (l *Lease) releaseBetweenStreams() (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), releaseTimeout)
	defer cancel()
	client := pb.NewLockServiceClient(l.conn)
	delay := firstBackoff
	for {
		answer, err := client.Release(ctx, &pb.ReleaseRequest{Name: l.name, Token: l.Token}, grpc.WaitForReady(true))
		if err == nil {
			return answer.Released, nil
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return false, err
		}
		select {
		case <-time.After(jitter(delay)):
			delay = min(2*delay, maxBackoff)
		case <-ctx.Done():
			return false, err
		}
	}
}

// releaseBestEffort frees a lease whose caller cancelled it while it was between streams (as
// the server does for a cancelled stream), briefly, without reporting.
func (l *Lease) releaseBestEffort() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), time.Second)
	defer cancel()
	_, _ = pb.NewLockServiceClient(l.conn).Release(ctx, &pb.ReleaseRequest{Name: l.name, Token: l.Token})
}

// Release gives the lock up and reports whether it was still held. Between two streams of a
// lease being resumed, it releases it with the unary Release call.
func (l *Lease) Release() (bool, error) {
	l.releaseOnce.Do(func() { close(l.releaseAsked) })
	select {
	case <-l.done:
	case <-time.After(releaseTimeout + 5*time.Second):
		l.stop() // a cancelled stream is released by its server
		return false, errors.New("leasehold: no answer to release")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isLost() {
		return false, l.releaseErr
	}
	return l.wasHeld, l.releaseErr
}
