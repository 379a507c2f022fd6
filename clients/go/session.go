package leasehold

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

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
	// MoreNames, LockDelay and MaxHold: as Options' (SessionLease.Fences, each name's fencing
	// token). At MaxHold this lease alone is lost, with LostMaxHold.
	MoreNames []string
	LockDelay time.Duration
	MaxHold   time.Duration
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
	closed bool       // the server confirmed the close
	reason string     // why it was lost (not closed)
	lost   *LostError // why it was lost, told to every lease still held (not closed)
	err    error
}

// sessionEntry is one lease of a session, by its id: waiting, or held.
type sessionEntry struct {
	id       uint64
	hold     *sessionHold
	acquire  *pb.SessionAcquire  // a lock's request, or nil
	campaign *pb.SessionCampaign // a campaign's request (its value the latest asked), or nil
	waitEnd  time.Time           // a lock's wait ends then (re-sent with what is left of it)

	token        string  // once held: its token (and resume token)
	fencingToken uint64  // once held: its fencing token (a leadership's term)
	fences       []Fence // once held: each name's fencing token (a lock)

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

// NewSession opens a session on conn. Its leases live as long as it does: until Close, the end
// of ctx (which closes it), or its loss (Lost).
func NewSession(ctx context.Context, conn grpc.ClientConnInterface, opts SessionOptions) (*Session, error) {
	if opts.TTL == 0 {
		opts.TTL = 30 * time.Second
	}
	grace := resumeGrace(opts.ResumeGrace, opts.TTL, opts.NoResume)
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

// Err is nil until Lost is closed, then a *LostError saying why (for which errors.Is(err,
// ErrSessionLost) holds), as every call made on the session then returns.
func (s *Session) Err() error {
	select {
	case <-s.lost:
		return s.ended()
	default:
		return nil
	}
}

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
			Name: name, MoreNames: opts.MoreNames, WaitMs: millis(opts.Wait), Holder: opts.Holder, Limit: opts.Limit,
			Mode: mode(opts.Shared), LockDelayMs: millis(opts.LockDelay), MaxHoldMs: millis(opts.MaxHold),
		},
		waitEnd: time.Now().Add(opts.Wait),
	}
	hold, err := s.take(ctx, e)
	if err != nil {
		return nil, err
	}
	return &SessionLease{Name: name, FencingToken: e.fencingToken, Token: e.token, Fences: e.fences, sessionHold: hold}, nil
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
	what := "lease"
	if e.campaign != nil {
		what = "leadership"
	}
	e.hold = &sessionHold{session: s, belief: newBelief(what)}
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
