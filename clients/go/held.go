// The held-stream core a Lease and a Candidate share, as the Node client's held.ts: one stream
// at a time holds the lease or the leadership; what the server vouches for is believed by this
// process's clock (belief); a stream that breaks is replaced by a resumed one on any server the
// connection reaches, with the same token and fencing token, within the validity last confirmed.
// A Session's leases share the belief, not the stream: a session has one stream for them all.

package leasehold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// Held streams, resumption and release between streams are bounded by these.
const (
	releaseTimeout = 10 * time.Second
	firstBackoff   = 20 * time.Millisecond
	maxBackoff     = 500 * time.Millisecond
)

// heard is what a message on a held stream means, whatever its kind.
type heard struct {
	kind         heardKind
	token        string  // heardHeld: the secret of the hold (its resume token)
	fencingToken uint64  // heardHeld: its fencing token (a leadership's term)
	fences       []Fence // heardHeld: each name's fencing token (a lease of several names)
	validForMs   uint32  // heardHeld, heardExtended: see vouchedUntil
	validToMs    uint64
	reason       string     // heardLost: why, in words
	code         LostReason // heardLost: why, for programs
	wasHeld      bool       // heardDone
}

type heardKind int

const (
	heardOther    heardKind = iota // a message of one kind alone (waiting, proclaimed)
	heardHeld                      // acquired, elected
	heardExtended                  // renewed
	heardLost                      // lost; the stream ends
	heardDone                      // released, resigned; the stream ends
)

// hearShared reads the messages every held stream has: `extended` and `lost`.
func hearShared(msg interface {
	GetExtended() *pb.Extended
	GetLost() *pb.Lost
}) heard {
	if e := msg.GetExtended(); e != nil {
		return heard{kind: heardExtended, validForMs: e.ValidForMs, validToMs: e.ValidToMs}
	}
	if l := msg.GetLost(); l != nil {
		return heard{kind: heardLost, reason: l.Reason, code: fromWire(l.Code)}
	}
	return heard{}
}

// heldKind is what differs between the kinds of things held on a stream: which stream, the
// request that resumes it, and what its messages mean.
type heldKind[Req, Res any] interface {
	openStream(ctx context.Context, conn grpc.ClientConnInterface) (grpc.BidiStreamingClient[Req, Res], error)
	resumeRequest(token string) *Req
	hear(msg *Res) heard
}

// heldWords name a kind in what its holder is told.
type heldWords struct {
	what   string // "lease", "leadership"
	stream string // "lease", "campaign": "<stream> stream ended: ..."
	fence  string // "fencing token", "term"
	stale  string // why a hold whose news arrived after its validity had run out is none
}

// holder is one lease or leadership, held by one stream at a time: its token and fencing token
// (set once it is first held; a resume that gives others loses it), and what this process
// believes of it.
type holder[Req, Res any] struct {
	kind    heldKind[Req, Res]
	words   heldWords
	conn    grpc.ClientConnInterface
	ctx     context.Context // the caller's: its end ends every attempt to attach
	streams context.Context // the parent of every stream once attached
	resume  bool
	// clocked: a hold's news arms expiry, since the server confirms every renewal (a lease; a
	// leadership with a resume grace). Without, the server alone watches it: a timer would end
	// it falsely.
	clocked bool
	expiry  *time.Timer // fires when the validity last vouched for runs out

	token        string
	fencingToken uint64
	*belief      // the holder's: a Lease's own (its Lost, LostReason, Err, ValidUntil)
}

// init readies a holder not yet held, believing in it by b.
func (h *holder[Req, Res]) init(kind heldKind[Req, Res], words heldWords, conn grpc.ClientConnInterface, ctx, streams context.Context, resume, clocked bool, b *belief) {
	h.kind, h.words, h.conn, h.ctx, h.streams, h.resume, h.clocked, h.belief = kind, words, conn, ctx, streams, resume, clocked, b
	h.expiry = time.NewTimer(time.Hour)
	h.expiry.Stop()
}

// heldStream is one stream holding it, read by a goroutine of its own.
type heldStream[Req, Res any] struct {
	reader[*Res]
	stream grpc.BidiStreamingClient[Req, Res]
	cancel context.CancelFunc
	opened time.Time // just before the stream was opened: what valid_to_ms counts from
}

// dial opens a stream in ctx and sends `request` on it. The moment before it opened is what
// valid_to_ms counts from (the server counts from its receipt, which is later).
func (h *holder[Req, Res]) dial(ctx context.Context, request *Req) (grpc.BidiStreamingClient[Req, Res], time.Time, error) {
	opened := time.Now()
	stream, err := h.kind.openStream(ctx, h.conn)
	if err == nil {
		err = stream.Send(request)
		if errors.Is(err, io.EOF) {
			err = nil // the stream ended: Recv says how
		}
	}
	return stream, opened, err
}

// attach opens a stream in ctx (which cancel ends), sends `request` and waits for the message
// that holds it (until `until`, unless it is zero; the end of h.ctx ends the wait as well),
// which it returns with the stream, now read by a goroutine of its own. A hold whose validity
// has already run out when its news arrives is none: the stream is cancelled and the error is a
// staleError. A `lost` instead is a *LostError.
func (h *holder[Req, Res]) attach(ctx context.Context, cancel context.CancelFunc, request *Req, until time.Time) (*heldStream[Req, Res], heard, error) {
	if !until.IsZero() {
		// Not a deadline of the stream's context: a resumed stream lives on past it.
		expire := time.AfterFunc(time.Until(until), cancel)
		defer expire.Stop()
	}
	attaching := context.AfterFunc(h.ctx, cancel)
	defer attaching()
	stream, opened, err := h.dial(ctx, request)
	for err == nil {
		var msg *Res
		msg, err = stream.Recv()
		if err != nil {
			break
		}
		switch news := h.kind.hear(msg); news.kind {
		case heardHeld:
			if h.believe(opened, news) {
				return &heldStream[Req, Res]{read(ctx, stream.Recv), stream, cancel, opened}, news, nil
			}
			// Held up on its way (a healed partition): it may be someone else's by now.
			// Cancelling the stream lets go of it (or keeps it only for its grace).
			err = staleError(h.words.stale)
		case heardLost:
			err = lostBy(h.words.what, news.code, news.reason)
		}
	}
	cancel()
	return nil, heard{}, err
}

// believe takes the validity a message received now on a stream opened at `opened` vouches for
// (acquired, elected, extended), unless it has already run out: false then. The validity is
// believed no further than the hold's ceiling (MaxHold), even one already reached: the hold is
// then lost at once, for MAX_HOLD, as expiry fires.
func (h *holder[Req, Res]) believe(opened time.Time, news heard) bool {
	received := time.Now()
	until := vouchedUntil(opened, received, news.validForMs, news.validToMs)
	if !until.After(received) {
		return false
	}
	until = h.vouched(until)
	if h.clocked {
		h.expiry.Reset(time.Until(until))
	}
	return true
}

// renewed takes the validity a renewal (extended) received now vouches for, and arms expiry for
// its end. Unlike a hold's news, a late one is taken as it is: the validity it gives, already
// past, ends the belief at once.
func (h *holder[Req, Res]) renewed(opened time.Time, news heard) {
	until := vouchedUntil(opened, time.Now(), news.validForMs, news.validToMs)
	h.expiry.Reset(time.Until(h.vouched(until)))
}

// broken tells a stream that broke, to be resumed, from one that ended for good: resumption is
// off, the caller's context ended, or the server answered (NOT_FOUND, PERMISSION_DENIED, ...).
func (h *holder[Req, Res]) broken(err error) bool {
	return h.resume && h.ctx.Err() == nil && transient(err)
}

// resumption is how resumeAfter ended.
type resumption int

const (
	resumed         resumption = iota // held on a new stream
	resumedStopping                   // held on a new stream, and a stop was asked meanwhile
	resumeStopped                     // a stop was asked with no stream to send it on
	resumeLost                        // lost (LostReason says why)
	resumeCancelled                   // lost: the caller's context ended
)

// resumeAfter reattaches on a new stream (any server the connection reaches), trying again with
// backoff and jitter until the validity runs out. A stop asked on *stopAsked (nil: none can be)
// meanwhile interrupts it: the attempt under way is given a moment to finish (the stop is then
// sent on its stream), else abandoned.
func (h *holder[Req, Res]) resumeAfter(cause error, stopAsked *<-chan struct{}) (*heldStream[Req, Res], resumption) {
	request := h.kind.resumeRequest(h.token)
	last := cause
	delay := firstBackoff
	for {
		until := h.ValidUntil()
		if !time.Now().Before(until) {
			h.lose(h.ranOut(LostUnreachable, "could not resume before the "+h.words.what+"'s validity ran out: "+describe(last)))
			return nil, resumeLost
		}
		type result struct {
			att  *heldStream[Req, Res]
			held heard
			err  error
		}
		attempt := make(chan result, 1)
		ctx, cancel := context.WithCancel(h.streams)
		go func() {
			att, held, err := h.attach(ctx, cancel, request, until)
			attempt <- result{att, held, err}
		}()
		var r result
		stopNow := false
		select {
		case r = <-attempt:
		case <-*stopAsked:
			*stopAsked = nil
			stopNow = true
			select {
			case r = <-attempt:
			case <-time.After(time.Second):
				cancel()
				r = <-attempt
			}
		}
		if r.err == nil {
			if r.held.fencingToken != h.fencingToken || r.held.token != h.token {
				r.att.cancel()
				h.lose(LostTaken, fmt.Sprintf("resumed with %s %d instead of %d", h.words.fence, r.held.fencingToken, h.fencingToken))
				return nil, resumeLost
			}
			if stopNow {
				return r.att, resumedStopping
			}
			return r.att, resumed
		}
		if stopNow {
			return nil, resumeStopped
		}
		if h.ctx.Err() != nil {
			h.lose(LostUnspecified, h.words.stream+" stream ended: "+h.ctx.Err().Error(), h.ctx.Err())
			return nil, resumeCancelled
		}
		var lost *LostError
		if errors.As(r.err, &lost) {
			h.loseBy(lost)
			return nil, resumeLost
		}
		if !transient(r.err) {
			h.lose(refusedResume(r.err), "could not resume the "+h.words.what+": "+describe(r.err), refusal(r.err))
			return nil, resumeLost
		}
		if time.Now().Before(until) || status.Code(r.err) != codes.Canceled {
			last = r.err // else the attempt was cut at the validity: the error before says more
		}
		wait := time.NewTimer(min(jitter(delay), time.Until(until)))
		delay = min(2*delay, maxBackoff)
		select {
		case <-wait.C:
		case <-h.ctx.Done():
			wait.Stop()
		case <-*stopAsked:
			wait.Stop()
			*stopAsked = nil
			return nil, resumeStopped
		}
	}
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

// transient tells a stream that broke (resumable) from one that ended for good: an answer such
// as NOT_FOUND or PERMISSION_DENIED, a `lost`, or news too late to believe.
func transient(err error) bool {
	var lost *LostError
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
