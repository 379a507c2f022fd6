package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// SessionOptions of a session: every lease on it shares its TTL and resume grace.
type SessionOptions struct {
	TTL time.Duration // default 30s
	// ResumeGrace keeps the session's leases that long (at most TTL) after its stream breaks or
	// its server shuts down, so that they can be resumed. Default: TTL, or 0 with NoResume (the
	// server then releases them the moment the stream ends).
	ResumeGrace time.Duration
	// Holder is shown to others who find one of the session's locks taken, for every lock that
	// gives no holder of its own (LockOptions.Holder).
	Holder string
	// NoResume turns automatic resumption off: a broken stream ends the session as lost, as a
	// server shutting down does, and ResumeGrace is only what is given.
	NoResume bool
}

// LockOptions of one lock taken on a session (its TTL and grace are the session's).
type LockOptions struct {
	Wait   time.Duration // 0: fail at once
	Holder string        // default: the session's (SessionOptions.Holder)
	// Limit lets up to that many leases hold the name at once (a semaphore; 0 or 1: a plain
	// lock), as Options.Limit.
	Limit uint32
	// Shared holds the name with other shared leases (readers), as Options.Shared.
	Shared bool
}

// ErrSessionClosed: the session was closed (Close, or the end of the context given to
// NewSession) before the call could be answered.
var ErrSessionClosed = errors.New("leasehold: session closed")

// ErrSessionLost: the whole session is lost (the server said so, its stream ended for good, or
// it could not be resumed); errors.Is holds for the error of every call made on it afterwards.
var ErrSessionLost = errors.New("leasehold: session lost")

// Session holds many leases (locks, permits, shared holds, leaderships) on one Session stream,
// as etcd's concurrency.Session holds mutexes and elections on one lease. The server renews them
// together and confirms them with one message per renewal period.
//
// A session outlives its server: when its stream breaks (the server shut down for a deploy,
// crashed, or the connection failed) a new stream is opened on a server that answers and every
// lease held is resumed there with its token and fencing token (or term), without a word to the
// caller; acquisitions still waiting are asked for again. SessionOptions.NoResume turns that off.
//
// Each lease has its own Lost: closed when the server says that lease alone is lost (its key was
// deleted or taken), when the validity the server last confirmed for it runs out by this
// process's clock, or when the session is lost. The session's Lost is closed when the server
// says the whole session is lost, when its stream ends for good, or when it cannot be resumed.
type Session struct {
	conn      grpc.ClientConnInterface
	ctx       context.Context // the caller's: its end closes the session
	streamCtx context.Context // every stream lives under it, not under the caller's cancellation
	stop      context.CancelFunc
	open      *pb.SessionOpen
	grace     time.Duration
	resume    bool

	calls chan func() // run on the session's goroutine
	done  chan struct{}
	lost  chan struct{}

	mu         sync.Mutex
	err        error // why the session ended: ErrSessionClosed, or one that wraps ErrSessionLost
	lostReason string

	// Owned by the session's goroutine (run, and the calls it runs).
	att        *sessionStream // nil between streams
	entries    map[uint64]*sessionEntry
	nextID     uint64
	validity   *time.Timer // fires at validityAt: the earliest end of a lease's validity
	validityAt time.Time
	// Resumption: when the stream broke, the error, the backoff, and until when a new stream
	// may be opened (zero: not resuming).
	lastErr   error
	backoff   time.Duration
	resumeBy  time.Time
	resumeByC <-chan time.Time
	retryC    <-chan time.Time
	attempts  chan sessionAttempt
	// Closing: Close was called (or the context ended); close is sent once every lease being
	// resumed has been answered, and must be confirmed by closeBy.
	closing   bool
	closeSent bool
	closeByC  <-chan time.Time
	outcome   *sessionOutcome // set when the session ends
}

// sessionOutcome is how a session ended.
type sessionOutcome struct {
	closed bool   // the server confirmed the close
	reason string // why it was lost (not closed)
	err    error
}

// sessionEntry is one lease of a session, by its id: waiting, or held.
type sessionEntry struct {
	id       uint64
	hold     *sessionHold
	acquire  *pb.SessionAcquire  // a lock's request, or nil
	campaign *pb.SessionCampaign // a campaign's request (its value the latest asked), or nil
	waitEnd  time.Time           // a lock's wait ends then (re-sent with what is left of it)

	token        string // once held: its token (and resume token)
	fencingToken uint64 // once held: its fencing token (a leadership's term)

	result     chan error // the caller waiting for its acquisition; nil once answered
	held       bool       // acquired: its token and fencing token are known
	sent       bool       // asked for (acquire, campaign or its resume) on the current stream
	confirmed  bool       // acquired on the current stream: a later kept_alive vouches for it
	releasing  []chan releaseResult
	proclaimed []chan error    // proclaims sent, each answered by a `proclaimed` in turn
	covered    []chan error    // proclaims whose value the resume sent: answered by its acquired
	unsent     []proclaimAsked // proclaims asked while a resume was under way
}

type proclaimAsked struct {
	value []byte
	reply chan error
}

type releaseResult struct {
	wasHeld bool
	err     error
}

type sessionAttempt struct {
	att *sessionStream
	err error
}

// sessionHold is what a lease of a session and a leadership on one share: its id on the
// session, its Lost signal and its validity.
type sessionHold struct {
	session *Session
	id      uint64
	belief  // Lost, LostReason, ValidUntil

	releaseOnce sync.Once
	released    releaseResult
}

// release lets the lease go and waits for the server's answer (once; later calls give the same
// answer).
func (h *sessionHold) release() (bool, error) {
	h.releaseOnce.Do(func() {
		s := h.session
		reply := make(chan releaseResult, 1)
		if !s.do(func() { s.release(h.id, reply) }) {
			return // the session ended: released by its close, or lost
		}
		h.released = <-reply
	})
	return h.released.wasHeld, h.released.err
}

// SessionLease is a lock (a permit, a shared hold) held on a session.
type SessionLease struct {
	Name         string
	FencingToken uint64
	Token        string // also the lease's resume token
	*sessionHold
}

// Release gives the lock up and reports whether it was still held. The session and its other
// leases go on.
func (l *SessionLease) Release() (bool, error) { return l.release() }

// SessionLeader is a leadership held on a session.
type SessionLeader struct {
	Election string
	Term     uint64 // the leadership's fencing token, larger for every new leader
	Token    string // also the leadership's resume token
	*sessionHold
}

// Resign steps down and reports whether this session was still leading.
func (l *SessionLeader) Resign() (bool, error) { return l.release() }

// Proclaim publishes a new value while leading, and waits until it is published.
func (l *SessionLeader) Proclaim(ctx context.Context, value []byte) error {
	s := l.session
	reply := make(chan error, 1)
	if !s.do(func() { s.proclaim(l.sessionHold, value, reply) }) {
		return s.ended()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NewSession opens a session on conn. Its leases live as long as it does: until Close, the end
// of ctx (which closes it), or its loss (Lost).
func NewSession(ctx context.Context, conn grpc.ClientConnInterface, opts SessionOptions) (*Session, error) {
	if opts.TTL == 0 {
		opts.TTL = 30 * time.Second
	}
	grace := opts.ResumeGrace
	if grace == 0 && !opts.NoResume {
		grace = opts.TTL
	}
	streamCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &Session{
		conn: conn, ctx: ctx, streamCtx: streamCtx, stop: stop,
		open:  &pb.SessionOpen{TtlMs: millis(opts.TTL), ResumeGraceMs: millis(grace), Holder: opts.Holder},
		grace: grace, resume: !opts.NoResume && grace > 0,
		calls: make(chan func()), done: make(chan struct{}), lost: make(chan struct{}),
		entries: map[uint64]*sessionEntry{}, validity: time.NewTimer(time.Hour),
		attempts: make(chan sessionAttempt, 1), backoff: firstBackoff,
	}
	s.validity.Stop()
	att, err := openSessionStream(streamCtx, conn, s.open)
	if err != nil {
		stop()
		return nil, refusal(err)
	}
	s.att = att
	go s.run()
	return s, nil
}

// Done is closed when the session has ended: closed, or lost.
func (s *Session) Done() <-chan struct{} { return s.done }

// Lost is closed when the whole session is lost: every lease on it is no longer ours (or may
// not be). LostReason says why.
func (s *Session) Lost() <-chan struct{} { return s.lost }

// LostReason says why Lost was closed.
func (s *Session) LostReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lostReason
}

// Close releases every lease of the session and ends it. It returns nil once the server has
// confirmed it, the error the session was lost with if it was lost, or an error saying the
// close could not be confirmed (within about 10 s; the leases then expire by their TTL).
func (s *Session) Close() error {
	s.do(func() { s.startClose() })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(s.err, ErrSessionClosed) {
		return nil
	}
	return s.err
}

// Acquire takes the lock `name` on the session, waiting up to opts.Wait. Cancelling ctx stops
// waiting (ctx bounds the wait only: the lease lives until Release, its loss or the session's
// end). When the lock stays taken the error is a *Refusal for which errors.Is(err,
// ErrNotAcquired) holds, as Acquire's; an `acquired` that arrives after its validity has run out
// gives an error for which errors.Is(err, ErrStale) holds.
func (s *Session) Acquire(ctx context.Context, name string, opts LockOptions) (*SessionLease, error) {
	e := &sessionEntry{
		acquire: &pb.SessionAcquire{
			Name: name, WaitMs: millis(opts.Wait), Holder: opts.Holder, Limit: opts.Limit, Mode: mode(opts.Shared),
		},
		waitEnd: time.Now().Add(opts.Wait),
	}
	hold, err := s.take(ctx, e)
	if err != nil {
		return nil, err
	}
	return &SessionLease{Name: name, FencingToken: e.fencingToken, Token: e.token, sessionHold: hold}, nil
}

// Campaign runs for leader of `election` on the session, publishing `value`, and waits until
// it leads (cancelling ctx leaves the line). The leadership lives until Resign, its loss or the
// session's end.
func (s *Session) Campaign(ctx context.Context, election string, value []byte) (*SessionLeader, error) {
	e := &sessionEntry{campaign: &pb.SessionCampaign{Election: election, Value: value}}
	hold, err := s.take(ctx, e)
	if err != nil {
		return nil, err
	}
	return &SessionLeader{Election: election, Term: e.fencingToken, Token: e.token, sessionHold: hold}, nil
}

// take adds a lease to the session and waits for its acquisition.
func (s *Session) take(ctx context.Context, e *sessionEntry) (*sessionHold, error) {
	result := make(chan error, 1)
	e.result = result
	e.hold = &sessionHold{session: s, belief: newBelief()}
	if !s.do(func() { s.add(e) }) {
		return nil, s.ended()
	}
	select {
	case err := <-result:
		if err != nil {
			return nil, err
		}
		return e.hold, nil
	case <-ctx.Done():
		// Stops the wait, or lets go of a lease acquired just then.
		s.do(func() { s.abandon(e) })
		return nil, ctx.Err()
	}
}

// do runs f on the session's goroutine; false once the session has ended.
func (s *Session) do(f func()) bool {
	select {
	case s.calls <- f:
		return true
	case <-s.done:
		return false
	}
}

// ended is the error of a call made after the session ended.
func (s *Session) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// run follows the session until it is closed or lost, resuming it when its stream breaks.
func (s *Session) run() {
	defer s.finish()
	ctxDone := s.ctx.Done()
	for s.outcome == nil {
		var events <-chan *pb.SessionResponse
		var failed <-chan error
		if s.att != nil {
			events, failed = s.att.events, s.att.failed
		}
		select {
		case msg := <-events:
			s.received(msg)
		case err := <-failed:
			s.broke(err)
		case f := <-s.calls:
			f()
		case <-s.validity.C:
			s.expire()
		case <-s.retryC:
			s.retryC = nil
			s.attempt()
		case a := <-s.attempts:
			s.attached(a)
		case <-s.resumeByC:
			s.resumeByC = nil
			if s.att == nil {
				s.loseSession("could not resume the session before its grace ran out: "+describe(s.lastErr), nil)
			} else {
				s.resumeBy = time.Time{} // a new stream is open: it says how it goes
			}
		case <-ctxDone:
			ctxDone = nil
			s.startClose()
		case <-s.closeByC:
			s.loseSession("the session's close was not confirmed in time: its leases expire by their TTL", nil)
		}
		s.sendCloseWhenSettled()
	}
}

// finish ends the session as s.outcome says: every caller still waiting is answered, and every
// lease still held is lost unless the session was closed.
func (s *Session) finish() {
	s.stop()
	s.validity.Stop()
	o := s.outcome
	s.mu.Lock()
	s.err = o.err
	if !o.closed {
		s.lostReason = o.reason
	}
	s.mu.Unlock()
	for _, e := range s.entries {
		if e.result != nil {
			e.result <- o.err
		}
		if e.held && !o.closed {
			e.hold.lose(o.reason)
		}
		for _, reply := range e.releasing {
			reply <- releaseResult{wasHeld: o.closed}
		}
		s.answerProclaims(e, o.err)
	}
	if !o.closed {
		close(s.lost)
	}
	close(s.done)
}

// loseSession ends the session as lost (once).
func (s *Session) loseSession(reason string, cause error) {
	if s.outcome != nil {
		return
	}
	err := fmt.Errorf("%w: %s", ErrSessionLost, reason)
	if cause != nil {
		err = fmt.Errorf("%w: %w", ErrSessionLost, refusal(cause))
	}
	s.outcome = &sessionOutcome{reason: reason, err: err}
}

// add gives a new lease its id and asks for it (now, or on the next stream).
func (s *Session) add(e *sessionEntry) {
	if s.closing {
		e.result <- ErrSessionClosed
		return
	}
	s.nextID++
	e.id, e.hold.id = s.nextID, s.nextID
	s.entries[e.id] = e
	if s.att != nil {
		s.sendEntry(e)
	}
}

// abandon: the caller stopped waiting for the lease; it is let go, acquired or not.
func (s *Session) abandon(e *sessionEntry) {
	if s.entries[e.id] != e {
		return // already failed, lost or let go
	}
	delete(s.entries, e.id)
	s.sendRelease(e)
}

// release lets a held lease go at its holder's request: the server's `released` answers reply.
func (s *Session) release(id uint64, reply chan releaseResult) {
	e := s.entries[id]
	if e == nil || !e.held {
		reply <- releaseResult{} // lost
		return
	}
	e.releasing = append(e.releasing, reply)
	if len(e.releasing) == 1 && e.confirmed {
		s.sendRelease(e) // else once it is resumed
	}
}

// proclaim publishes a leadership's new value.
func (s *Session) proclaim(h *sessionHold, value []byte, reply chan error) {
	e := s.entries[h.id]
	if e == nil || !e.held || e.campaign == nil {
		if reason := h.LostReason(); reason != "" {
			reply <- errors.New("leasehold: leadership lost: " + reason)
		} else {
			reply <- errors.New("leasehold: no longer leading: resigned")
		}
		return
	}
	e.campaign.Value = value
	switch {
	case e.confirmed:
		s.sendProclaim(e, value, reply)
	case e.sent: // its resume is under way with the value before: proclaimed once resumed
		e.unsent = append(e.unsent, proclaimAsked{value, reply})
	default: // its resume, yet to be sent, publishes it
		e.covered = append(e.covered, reply)
	}
}

func (s *Session) answerProclaims(e *sessionEntry, err error) {
	for _, reply := range e.proclaimed {
		reply <- err
	}
	for _, reply := range e.covered {
		reply <- err
	}
	for _, asked := range e.unsent {
		asked.reply <- err
	}
	e.proclaimed, e.covered, e.unsent = nil, nil, nil
}

// startClose closes the session: at once when it holds nothing and has no stream, else with
// `close` once every lease being resumed has been answered, within releaseTimeout.
func (s *Session) startClose() {
	if s.closing || s.outcome != nil {
		return
	}
	s.closing = true
	s.closeByC = time.After(releaseTimeout)
	held := 0
	for id, e := range s.entries {
		if e.held {
			held++
			continue
		}
		delete(s.entries, id) // its wait ends with the session
		e.result <- ErrSessionClosed
		e.result = nil
	}
	if held == 0 && s.att == nil {
		s.outcome = &sessionOutcome{closed: true, err: ErrSessionClosed}
	}
}

func (s *Session) sendCloseWhenSettled() {
	if !s.closing || s.closeSent || s.att == nil || s.outcome != nil {
		return
	}
	for _, e := range s.entries {
		if e.held && !e.confirmed {
			return // its resume first, so that the close releases it
		}
	}
	s.closeSent = true
	s.att.send(&pb.SessionRequest{Action: &pb.SessionRequest_Close{Close: &pb.SessionClose{}}})
}

// sendEntry asks for a lease on the current stream: a held one resumed by its token, one still
// waiting asked for afresh (with what is left of its wait).
func (s *Session) sendEntry(e *sessionEntry) {
	e.sent = true
	if e.campaign != nil {
		campaign := &pb.SessionCampaign{Id: e.id, Election: e.campaign.Election, Value: e.campaign.Value}
		if e.held {
			campaign.ResumeToken = e.token
		}
		s.att.send(&pb.SessionRequest{Action: &pb.SessionRequest_Campaign{Campaign: campaign}})
		return
	}
	acquire := proto.Clone(e.acquire).(*pb.SessionAcquire)
	acquire.Id = e.id
	if e.held {
		acquire = &pb.SessionAcquire{Id: e.id, Name: e.acquire.Name, ResumeToken: e.token}
	} else if acquire.WaitMs > 0 {
		acquire.WaitMs = millis(max(time.Until(e.waitEnd), 0))
	}
	s.att.send(&pb.SessionRequest{Action: &pb.SessionRequest_Acquire{Acquire: acquire}})
}

// sendRelease lets a lease go on the current stream, if it was asked for there.
func (s *Session) sendRelease(e *sessionEntry) {
	if s.att != nil && e.sent {
		s.att.send(&pb.SessionRequest{Action: &pb.SessionRequest_Release{Release: &pb.SessionRelease{Id: e.id}}})
	}
}

func (s *Session) sendProclaim(e *sessionEntry, value []byte, reply chan error) {
	e.proclaimed = append(e.proclaimed, reply)
	s.att.send(&pb.SessionRequest{Action: &pb.SessionRequest_Proclaim{Proclaim: &pb.SessionProclaim{Id: e.id, Value: value}}})
}

// received handles one message of the current stream.
func (s *Session) received(msg *pb.SessionResponse) {
	// The stream works: the next break backs off from the start, with a new grace.
	s.backoff = firstBackoff
	s.resumeBy, s.resumeByC = time.Time{}, nil
	switch event := msg.Event.(type) {
	case *pb.SessionResponse_Acquired:
		s.acquired(event.Acquired)
	case *pb.SessionResponse_KeptAlive:
		kept := event.KeptAlive
		until := vouchedUntil(s.att.opened, time.Now(), kept.ValidForMs, kept.ValidToMs)
		for _, e := range s.entries {
			if e.confirmed {
				e.hold.vouched(until)
			}
		}
		s.armAt(until)
	case *pb.SessionResponse_Proclaimed:
		if e := s.entries[event.Proclaimed.Id]; e != nil && len(e.proclaimed) > 0 {
			e.proclaimed[0] <- nil
			e.proclaimed = e.proclaimed[1:]
		}
	case *pb.SessionResponse_Released:
		e := s.entries[event.Released.Id]
		if e == nil {
			return
		}
		delete(s.entries, e.id)
		for _, reply := range e.releasing {
			reply <- releaseResult{wasHeld: event.Released.WasHeld}
		}
		s.answerProclaims(e, errors.New("leasehold: resigned"))
	case *pb.SessionResponse_LeaseLost:
		if e := s.entries[event.LeaseLost.Id]; e != nil {
			s.loseEntry(e, event.LeaseLost.Reason, false)
		}
	case *pb.SessionResponse_Failed:
		s.failed(event.Failed)
	case *pb.SessionResponse_Closed:
		s.outcome = &sessionOutcome{closed: true, err: ErrSessionClosed}
	case *pb.SessionResponse_Lost:
		s.loseSession(event.Lost.Reason, nil)
	}
}

// acquired: a lease is held, or resumed on the current stream.
func (s *Session) acquired(acquired *pb.SessionAcquired) {
	e := s.entries[acquired.Id]
	if e == nil {
		return // let go meanwhile
	}
	received := time.Now()
	until := vouchedUntil(s.att.opened, received, acquired.ValidForMs, acquired.ValidToMs)
	if !until.After(received) {
		// Held up on its way (a healed partition): it may be someone else's by now.
		if e.held {
			s.loseEntry(e, "resumed, but the news arrived after its validity had run out", true)
			return
		}
		delete(s.entries, e.id)
		s.sendRelease(e)
		e.result <- staleError("acquired, but the news arrived after its validity had run out")
		e.result = nil
		return
	}
	if e.held {
		if acquired.Token != e.token || acquired.FencingToken != e.fencingToken {
			s.loseEntry(e, fmt.Sprintf("resumed with fencing token %d instead of %d", acquired.FencingToken, e.fencingToken), true)
			return
		}
	} else {
		e.held, e.token, e.fencingToken = true, acquired.Token, acquired.FencingToken
	}
	e.confirmed = true
	e.hold.vouched(until)
	s.armAt(until)
	if e.result != nil {
		e.result <- nil
		e.result = nil
	}
	for _, reply := range e.covered {
		reply <- nil // the resume published the latest value
	}
	e.covered = nil
	for _, asked := range e.unsent {
		s.sendProclaim(e, asked.value, asked.reply)
	}
	e.unsent = nil
	if len(e.releasing) > 0 {
		s.sendRelease(e)
	}
}

// failed: a lease could not be had (or resumed), or a proclaim was refused.
func (s *Session) failed(failed *pb.SessionFailed) {
	e := s.entries[failed.Id]
	if e == nil {
		return
	}
	err := sessionFailure(failed)
	switch {
	case !e.held:
		delete(s.entries, e.id)
		if e.result != nil {
			e.result <- err
			e.result = nil
		}
	case !e.confirmed:
		s.loseEntry(e, "could not resume the lease: "+describe(err), false)
	case len(e.proclaimed) > 0:
		e.proclaimed[0] <- err
		e.proclaimed = e.proclaimed[1:]
	}
}

// sessionFailure is the error of a `failed`: its status, with the details a stream's status
// carries (a *Refusal when they are Leasehold's, or for ABORTED).
func sessionFailure(failed *pb.SessionFailed) error {
	st := &spb.Status{}
	if len(failed.Status) > 0 && proto.Unmarshal(failed.Status, st) != nil {
		st = &spb.Status{}
	}
	st.Code, st.Message = failed.Code, failed.Message
	if codes.Code(st.Code) == codes.OK {
		st.Code = int32(codes.Unknown) // a failure is never OK
	}
	return refusal(status.FromProto(st).Err())
}

// loseEntry: one lease is lost. Lost on this side (by its validity, a stale or wrong resume),
// it is let go on the server too.
func (s *Session) loseEntry(e *sessionEntry, reason string, letGo bool) {
	delete(s.entries, e.id)
	if letGo {
		s.sendRelease(e)
	}
	err := errors.New("leasehold: lease lost: " + reason)
	if e.result != nil { // a leadership lost as it was won
		e.result <- err
		e.result = nil
	}
	if e.held {
		e.hold.lose(reason)
	}
	for _, reply := range e.releasing {
		reply <- releaseResult{}
	}
	s.answerProclaims(e, err)
}

// armAt makes the validity timer fire by `at`.
func (s *Session) armAt(at time.Time) {
	if s.validityAt.IsZero() || at.Before(s.validityAt) {
		s.validityAt = at
		s.validity.Reset(time.Until(at))
	}
}

// expire loses every lease whose validity has run out by this process's clock, and arms the
// timer for the next.
func (s *Session) expire() {
	s.validityAt = time.Time{}
	now := time.Now()
	var next time.Time
	for _, e := range s.entries {
		if !e.held {
			continue
		}
		until := e.hold.ValidUntil()
		if !now.Before(until) {
			reason := "no renewal confirmed before the lease ran out (server silent)"
			if !e.confirmed {
				reason = "could not resume before the lease's validity ran out"
				if s.lastErr != nil {
					reason += ": " + describe(s.lastErr)
				}
			}
			s.loseEntry(e, reason, true)
			continue
		}
		if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	if !next.IsZero() {
		s.armAt(next)
	}
}

// broke: the stream ended without `closed` or `lost`. A resumable session opens a new one
// (after a backoff), until its grace or its leases' validity runs out.
func (s *Session) broke(err error) {
	s.att.cancel()
	s.att = nil
	s.closeSent = false
	if !s.resume || !transient(err) {
		s.loseSession("session stream ended: "+describe(err), err)
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
			s.loseSession("could not resume the session: "+describe(a.err), a.err)
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
