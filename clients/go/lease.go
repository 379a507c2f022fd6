package leasehold

import (
	"context"
	"errors"
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
	// MoreNames are further names held with `name`, all or none (plain exclusive locks only):
	// the lease is acquired when every name is taken, with a fencing token each (Lease.Fences),
	// and lost as a whole when any is (the others then expire by their TTL, not released while
	// this process may still believe in them). Callers asking for overlapping sets in any order
	// cannot deadlock (the server takes them in one order, holding none while it waits).
	MoreNames []string
	// LockDelay keeps each name from being taken for that long after the lease is lost (it
	// expired, was revoked, or its stream broke past its grace), so that an unfenced resource is
	// not written by the next holder while this one may still be writing. A release frees the
	// names at once. 0: none; at most an hour.
	LockDelay time.Duration
	// MaxHold is a ceiling on the hold: the server stops renewing it then and the lease is lost
	// with LostMaxHold, not resumed. This process believes in the lease no longer than MaxHold
	// after its acquire was sent (a wait counts against it: the client cannot see when the
	// server took the name). 0: none; at least TTL when given, at most 7 days.
	MaxHold time.Duration
}

// Fence is one name of a lease and its fencing token.
type Fence struct {
	Name         string
	FencingToken uint64
}

// Lease is a held lock.
type Lease struct {
	FencingToken uint64 // the first name's (Fences[0]'s)
	Token        string
	// Fences is each name's fencing token: `name` first, then Options.MoreNames, in the order
	// asked. A lease of one name has one.
	Fences []Fence

	belief // Lost, LostReason, Err, ValidUntil
	// The Lease stream that holds it, resumed when it breaks. Every stream lives under the
	// caller's context.
	held holder[pb.LeaseRequest, pb.LeaseResponse]
	stop context.CancelFunc // ends the caller's context, as given to Acquire
	kind leaseStream        // its names, for a release between streams

	done         chan struct{} // the lease's goroutine ended: released, or lost and let go
	releaseAsked chan struct{}
	releaseOnce  sync.Once

	mu         sync.Mutex // guards how the release went
	wasHeld    bool
	releaseErr error
}

// Acquire takes the lock `name`, waiting up to opts.Wait. Cancelling ctx releases the lease.
// When the lock stays taken the error is a *Refusal (reason LOCK_HELD or WAIT_EXPIRED, the
// holder, when to retry) for which errors.Is(err, ErrNotAcquired) holds. An `acquired` that
// arrives after the validity it gives has run out (held up on its way) is no lease: the error
// then satisfies errors.Is(err, ErrStale).
func Acquire(ctx context.Context, conn *grpc.ClientConn, name string, opts Options) (*Lease, error) {
	if opts.TTL == 0 {
		opts.TTL = 30 * time.Second
	}
	grace := resumeGrace(opts.ResumeGrace, opts.TTL, opts.NoResume)
	ctx, stop := context.WithCancel(ctx)
	kind := leaseStream{name: name, moreNames: opts.MoreNames, ttlMs: millis(opts.TTL), graceMs: millis(grace)}
	l := &Lease{belief: newBelief("lease"), stop: stop, kind: kind, done: make(chan struct{}), releaseAsked: make(chan struct{})}
	// Its streams live under ctx; every renewal is confirmed, so it is clocked.
	l.held.init(kind, leaseWords, conn, ctx, ctx, !opts.NoResume, true, &l.belief)
	streamCtx, cancel := context.WithCancel(ctx)
	l.capAt(time.Now(), opts.MaxHold)
	att, acquired, err := l.held.attach(streamCtx, cancel, &pb.LeaseRequest{Action: &pb.LeaseRequest_Acquire{Acquire: &pb.LeaseAcquire{
		Name: name, MoreNames: opts.MoreNames, TtlMs: kind.ttlMs, WaitMs: millis(opts.Wait), Holder: opts.Holder,
		Limit: opts.Limit, Mode: mode(opts.Shared), ResumeGraceMs: kind.graceMs, ResumeToken: opts.ResumeToken,
		LockDelayMs: millis(opts.LockDelay), MaxHoldMs: millis(opts.MaxHold),
	}}}, time.Time{})
	if err != nil {
		stop()
		return nil, refusal(err)
	}
	l.held.token, l.held.fencingToken = acquired.token, acquired.fencingToken
	l.FencingToken, l.Token = acquired.fencingToken, acquired.token
	l.Fences = fencesOr(acquired.fences, name, acquired.fencingToken)
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

// fences are the wire's fences, in this package's type; a server that predates them sends none,
// for a lease of one name: its fencing token then.
func fences(wire []*pb.NameFence) []Fence {
	converted := make([]Fence, 0, len(wire))
	for _, fence := range wire {
		converted = append(converted, Fence{Name: fence.Name, FencingToken: fence.FencingToken})
	}
	return converted
}

// fencesOr is `given`, or the one name's fencing token when none were given (a server that
// predates fences).
func fencesOr(given []Fence, name string, fencingToken uint64) []Fence {
	if len(given) == 0 {
		return []Fence{{Name: name, FencingToken: fencingToken}}
	}
	return given
}

// leaseStream is the Lease stream, as the held-stream core sees it.
type leaseStream struct {
	name      string
	moreNames []string
	ttlMs     uint32
	graceMs   uint32
}

var leaseWords = heldWords{
	what: "lease", stream: "lease", fence: "fencing token",
	stale: "acquired, but the news arrived after its validity had run out",
}

func (leaseStream) openStream(ctx context.Context, conn grpc.ClientConnInterface) (pb.LockService_LeaseClient, error) {
	return pb.NewLockServiceClient(conn).Lease(ctx)
}

func (k leaseStream) resumeRequest(token string) *pb.LeaseRequest {
	return &pb.LeaseRequest{Action: &pb.LeaseRequest_Acquire{Acquire: &pb.LeaseAcquire{
		Name: k.name, MoreNames: k.moreNames, TtlMs: k.ttlMs, ResumeGraceMs: k.graceMs, ResumeToken: token,
	}}}
}

// releaseRequest releases the lease by its token with the unary Release call: every name.
func (k leaseStream) releaseRequest(token string) *pb.ReleaseRequest {
	return &pb.ReleaseRequest{Name: k.name, MoreNames: k.moreNames, Token: token}
}

func (leaseStream) hear(msg *pb.LeaseResponse) heard {
	if a := msg.GetAcquired(); a != nil {
		return heard{kind: heardHeld, token: a.Token, fencingToken: a.FencingToken, fences: fences(a.Fences), validForMs: a.ValidForMs, validToMs: a.ValidToMs}
	}
	if r := msg.GetReleased(); r != nil {
		return heard{kind: heardDone, wasHeld: r.WasHeld}
	}
	return hearShared(msg) // extended, lost; waiting says nothing to a holder
}

func (l *Lease) released(wasHeld bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wasHeld, l.releaseErr = wasHeld, refusal(err)
}

// run follows the lease until it is released or lost, resuming it when its stream breaks.
func (l *Lease) run(att *heldStream[pb.LeaseRequest, pb.LeaseResponse]) {
	defer close(l.done)
	defer l.stop()
	defer func() {
		if att != nil {
			att.cancel()
		}
	}()
	defer l.held.expiry.Stop()
	var releaseAsked <-chan struct{} = l.releaseAsked
	releasing := false
	var sendErr error
	for {
		select {
		case msg := <-att.events:
			switch news := l.held.kind.hear(msg); news.kind {
			case heardExtended:
				l.held.renewed(att.opened, news)
			case heardLost:
				l.lose(news.code, news.reason)
			case heardDone:
				l.released(news.wasHeld, nil)
				return
			}
		case err := <-att.failed:
			att.cancel()
			broken := l.held.broken(err)
			switch {
			case l.isLost():
				l.released(false, sendErr)
				return
			case releasing && broken:
				l.released(l.releaseBetweenStreams())
				return
			case !broken:
				if l.held.resume && l.held.ctx.Err() != nil {
					// The caller cancelled: the server keeps a resumable lease whose stream
					// ends without a release (it cannot tell a cancel from a dead connection).
					l.releaseBestEffort()
				}
				l.lose(streamEnded(l.held.ctx, err), "lease stream ended: "+describe(err), l.held.ctx.Err(), refusal(err))
				l.released(false, sendErr)
				return
			}
			var how resumption
			att, how = l.held.resumeAfter(err, &releaseAsked)
			switch how {
			case resumeStopped:
				l.released(l.releaseBetweenStreams())
				return
			case resumeCancelled:
				l.releaseBestEffort()
				return
			case resumeLost:
				return
			}
			if how == resumedStopping {
				releasing = true
				sendErr = l.sendRelease(att)
			}
		case <-l.held.expiry.C:
			l.lose(l.ranOut(LostUnreachable, "no renewal confirmed before the lease ran out (server silent)"))
		case <-releaseAsked:
			releaseAsked = nil
			releasing = true
			sendErr = l.sendRelease(att)
		}
	}
}

// sendRelease asks the server to release the lease; the stream then ends with `released`
// (or breaks, which run sees).
func (l *Lease) sendRelease(att *heldStream[pb.LeaseRequest, pb.LeaseResponse]) error {
	err := att.stream.Send(&pb.LeaseRequest{Action: &pb.LeaseRequest_Release{Release: &pb.LeaseRelease{}}})
	if err == nil {
		err = att.stream.CloseSend()
	}
	return err
}

// releaseBetweenStreams releases the lease by its token with the unary Release call, on any
// server the connection reaches, within releaseTimeout.
func (l *Lease) releaseBetweenStreams() (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.held.ctx), releaseTimeout)
	defer cancel()
	client := pb.NewLockServiceClient(l.held.conn)
	delay := firstBackoff
	for {
		answer, err := client.Release(ctx, l.kind.releaseRequest(l.Token), grpc.WaitForReady(true))
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
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.held.ctx), time.Second)
	defer cancel()
	_, _ = pb.NewLockServiceClient(l.held.conn).Release(ctx, l.kind.releaseRequest(l.Token))
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
