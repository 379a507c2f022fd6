package leasehold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// Leader is an election's leader: its term (the leadership lease's fencing token, larger for
// every new leader) and the value it published.
type Leader struct {
	Term  uint64
	Value []byte
}

// CampaignOptions of one candidacy.
type CampaignOptions struct {
	// ResumeGrace keeps the leadership that long (at most the ttl) after the leader's stream
	// breaks or its server shuts down, so that it can be resumed with its term. Default: the
	// ttl, or 0 with NoResume (the leader then steps down the moment its stream ends).
	ResumeGrace time.Duration
	// NoResume turns automatic resumption off: a leader whose stream breaks has lost its
	// leadership, as before.
	NoResume bool
}

// Candidate is one candidacy in an election, held by one Campaign stream at a time. Cancelling
// the context given to Campaign steps down (or leaves the line), like Resign without waiting for
// the answer: the candidate sends `resign` and its stream lives until the server answers (within
// the ttl), since a stream merely cancelled would keep a leader's leadership for its grace (the
// server cannot tell it from a dead connection).
//
// A leader outlives its server: when its stream breaks (the server shut down for a deploy,
// crashed, or the connection failed) the leadership is resumed on a server that answers, with
// the same term, and observers see no change. It is lost (Lost returns, Done closes) when it
// cannot be resumed, or when the validity the server last confirmed (in `elected`, then in
// every renewal it reports) runs out by this process's clock. CampaignOptions.NoResume turns
// that off: the server then reports no renewals, and a broken stream ends the leadership. A candidate still waiting in line when its
// stream breaks ends with the error (Elected returns it): campaign again.
type Candidate struct {
	// The Campaign stream that holds the candidacy, resumed when it breaks while leading, and
	// until when the leadership is believed. Its ctx is the caller's; its streams are not
	// cancelled with it (run resigns first).
	held     holder[pb.CampaignRequest, pb.CampaignResponse]
	cancel   context.CancelFunc
	election string
	ttlMs    uint32
	graceMs  uint32

	requests chan candidateRequest
	elected  chan struct{}
	done     chan struct{}

	mu        sync.Mutex
	value     []byte
	reason    string // why the candidacy ended
	err       error  // the error it ended with, if it did
	outcome   outcome
	wasLeader bool
}

// outcome is how a candidacy ended.
type outcome int

const (
	failed   outcome = iota // the stream failed (err)
	lost                    // the leadership was lost (reason)
	resigned                // it stepped down (wasLeader)
)

// candidateRequest is a Proclaim (value, answered on reply) or a Resign.
type candidateRequest struct {
	resign bool
	value  []byte
	reply  chan error
}

// campaignWords name a leadership in what its candidate is told.
var campaignWords = heldWords{what: "leadership", stream: "campaign", fence: "term", stale: staleElected}

// Campaign joins `election` as a candidate publishing `value` and returns at once; Elected waits
// in line. ttl bounds how long the election stays leaderless if this process's server dies while
// it leads. At most one CampaignOptions.
func Campaign(ctx context.Context, conn grpc.ClientConnInterface, election string, value []byte, ttl time.Duration, opts ...CampaignOptions) (*Candidate, error) {
	var o CampaignOptions
	if len(opts) > 0 {
		o = opts[len(opts)-1]
	}
	grace := resumeGrace(o.ResumeGrace, ttl, o.NoResume)
	ctx, cancel := context.WithCancel(ctx)
	c := &Candidate{
		cancel: cancel, election: election, ttlMs: millis(ttl), graceMs: millis(grace), value: value,
		requests: make(chan candidateRequest), elected: make(chan struct{}), done: make(chan struct{}),
	}
	// Its streams are not cancelled with ctx: run resigns first (see Candidate). Renewals are
	// confirmed (and the leadership ended by this process's clock) with a grace only.
	resume := !o.NoResume
	c.held.init(c, campaignWords, conn, ctx, context.WithoutCancel(ctx), resume, resume && c.graceMs > 0,
		&belief{lost: make(chan struct{}), what: "leadership"})
	streamCtx, streamCancel := context.WithCancel(c.held.streams)
	stream, opened, err := c.held.dial(streamCtx, c.resumeRequest(""))
	if err != nil {
		streamCancel()
		cancel()
		return nil, refusal(err)
	}
	go c.run(&heldStream[pb.CampaignRequest, pb.CampaignResponse]{read(streamCtx, stream.Recv), stream, streamCancel, opened})
	return c, nil
}

func (c *Candidate) openStream(ctx context.Context, conn grpc.ClientConnInterface) (pb.ElectionService_CampaignClient, error) {
	return pb.NewElectionServiceClient(conn).Campaign(ctx)
}

// resumeRequest starts the candidacy (resumeToken ""), or resumes its leadership, with the latest
// value asked for.
func (c *Candidate) resumeRequest(resumeToken string) *pb.CampaignRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &pb.CampaignRequest{Action: &pb.CampaignRequest_Start{Start: &pb.CampaignStart{
		Election: c.election, Value: c.value, TtlMs: c.ttlMs,
		ResumeToken: resumeToken, ResumeGraceMs: c.graceMs,
	}}}
}

func (c *Candidate) hear(msg *pb.CampaignResponse) heard {
	if e := msg.GetElected(); e != nil {
		return heard{kind: heardHeld, token: e.Token, fencingToken: e.Term, validForMs: e.ValidForMs, validToMs: e.ValidToMs}
	}
	if r := msg.GetResigned(); r != nil {
		return heard{kind: heardDone, wasHeld: r.WasLeader}
	}
	return hearShared(msg) // extended, lost; proclaimed is the candidate's own
}

// end records how the candidacy ended.
func (c *Candidate) end(how outcome, reason string, err error, wasLeader bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outcome, c.reason, c.err, c.wasLeader = how, reason, refusal(err), wasLeader
}

// loseLeadership records a lost leadership, for `reason` (the first loss stays).
func (c *Candidate) loseLeadership(reason LostReason, message string) {
	c.held.lose(reason, message)
	c.endLost()
}

// endLost ends the candidacy as its belief was lost: the error it ends with is the *LostError.
func (c *Candidate) endLost() {
	c.end(lost, c.held.LostReason(), c.held.Err(), false)
}

// staleElected is the message of an `elected` that arrived after the validity it gives had run
// out: no leadership.
const staleElected = "elected, but the news arrived after the leadership's validity had run out"

// ended is the error for a call made after the candidacy ended.
func (c *Candidate) ended() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return errors.New("leasehold: campaign ended: " + c.reason)
}

// run follows the candidacy until it ends, resuming the leadership when its stream breaks.
func (c *Candidate) run(att *heldStream[pb.CampaignRequest, pb.CampaignResponse]) {
	h := &c.held
	var proclaims []chan error // sent, not yet proclaimed
	defer close(c.done)
	defer func() {
		for _, reply := range proclaims {
			reply <- c.ended()
		}
	}()
	defer c.cancel()
	defer func() { att.cancel() }()
	defer h.expiry.Stop()
	leading, resigning := false, false
	cancelled := h.ctx.Done()
	var answerWait <-chan time.Time // armed once the caller cancelled
	resign := func() {
		resigning = true
		_ = att.stream.Send(&pb.CampaignRequest{Action: &pb.CampaignRequest_Resign{Resign: &pb.Resign{}}})
	}
	for {
		select {
		case msg := <-att.events:
			switch news := c.hear(msg); news.kind {
			case heardHeld:
				if leading {
					continue
				}
				if !h.believe(att.opened, news) {
					// Held up on its way (a healed partition): another may lead by now. Not
					// elected, and the stream is cancelled on return.
					c.end(lost, staleElected, fmt.Errorf("leasehold: leadership lost: %w", staleError(staleElected)), false)
					return
				}
				leading = true
				h.token, h.fencingToken = news.token, news.fencingToken
				close(c.elected)
			case heardExtended:
				h.renewed(att.opened, news)
			case heardLost:
				c.loseLeadership(news.code, news.reason)
				return
			case heardDone:
				// Elected still reports a cancelled context as such.
				c.end(resigned, "resigned", h.ctx.Err(), news.wasHeld)
				return
			default:
				if msg.GetProclaimed() != nil && len(proclaims) > 0 {
					proclaims[0] <- nil
					proclaims = proclaims[1:]
				}
			}
		case err := <-att.failed:
			att.cancel()
			if !leading || !h.broken(err) {
				if errors.Is(err, io.EOF) {
					err = errors.New("leasehold: campaign stream ended")
				}
				c.end(failed, err.Error(), err, false)
				return
			}
			// A resign waits for the resume: nothing stops it but the validity and the context.
			next, _ := h.resumeAfter(err, new(<-chan struct{}))
			if next == nil {
				c.endLost() // resumeAfter said why
				return
			}
			att = next
			// The resumed start published the latest value asked for.
			for _, reply := range proclaims {
				reply <- nil
			}
			proclaims = nil
			if resigning {
				resign()
			}
		case <-cancelled:
			cancelled = nil
			if !resigning {
				resign()
			}
			answerWait = time.After(time.Duration(c.ttlMs) * time.Millisecond)
		case <-answerWait:
			c.end(failed, "cancelled; no answer to its resign within the ttl", h.ctx.Err(), false)
			return
		case <-h.expiry.C:
			c.loseLeadership(LostUnreachable, "no renewal confirmed before the leadership ran out (server silent)")
			return
		case request := <-c.requests:
			// A failed send means a broken stream: failed says so next.
			if request.resign {
				resign()
				continue
			}
			c.mu.Lock()
			c.value = request.value
			c.mu.Unlock()
			proclaims = append(proclaims, request.reply)
			_ = att.stream.Send(&pb.CampaignRequest{Action: &pb.CampaignRequest_Proclaim{Proclaim: &pb.Proclaim{Value: request.value}}})
		}
	}
}

// Elected waits until this candidate leads and returns its term. An `elected` that arrives
// after the validity it gives has run out (held up on its way, as by a healed partition) is no
// leadership: the candidacy ends as lost, and the error satisfies errors.Is(err, ErrStale).
func (c *Candidate) Elected() (uint64, error) {
	select {
	case <-c.elected:
	case <-c.done:
		select {
		case <-c.elected:
		default:
			return 0, c.ended()
		}
	}
	return c.held.fencingToken, nil // set before elected was closed, never changed
}

// Proclaim publishes a new value while leading.
func (c *Candidate) Proclaim(value []byte) error {
	reply := make(chan error, 1)
	select {
	case c.requests <- candidateRequest{value: value, reply: reply}:
		return <-reply
	case <-c.done:
		return c.ended()
	}
}

// Lost waits until the leadership is lost and returns the reason (or, should the candidacy end
// otherwise, how it ended: "resigned", or the stream's error).
func (c *Candidate) Lost() string {
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// Err is nil while the candidacy goes on, and after it resigned; else the error it ended with.
// For a lost leadership that is a *LostError, whose Reason programs branch on:
//
//	<-candidate.Done()
//	if errors.Is(candidate.Err(), leasehold.LostRevoked) { ... an operator took it away ... }
//
// Elected and Proclaim return the same error once the candidacy has ended.
func (c *Candidate) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	c.mu.Lock()
	how := c.outcome
	c.mu.Unlock()
	if how == resigned {
		return nil
	}
	return c.ended()
}

// ValidUntil is until when the server last vouched for the leadership, by this process's clock
// (zero before it was elected): the candidate believes in it no longer than this without another
// confirmation (a renewal, or a resume elsewhere), and is lost then at the latest. Without a
// resume grace the server reports no renewals: this is then the validity of `elected` alone.
func (c *Candidate) ValidUntil() time.Time { return c.held.ValidUntil() }

// Done is closed when the candidacy has ended: leadership lost (Lost says why), resigned, or
// the stream failed.
func (c *Candidate) Done() <-chan struct{} { return c.done }

// Resign steps down now and reports whether this candidate was leading.
func (c *Candidate) Resign() (bool, error) {
	defer c.cancel()
	select {
	case c.requests <- candidateRequest{resign: true}:
	case <-c.done:
	}
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.outcome {
	case resigned:
		return c.wasLeader, nil
	case lost:
		return false, nil
	default:
		return false, c.err
	}
}

// CurrentLeader returns the leader of `election` now, or nil when it has none.
func CurrentLeader(ctx context.Context, conn grpc.ClientConnInterface, election string) (*Leader, error) {
	answer, err := pb.NewElectionServiceClient(conn).Leader(ctx, &pb.LeaderRequest{Election: election})
	if err != nil || !answer.HasLeader {
		return nil, refusal(err)
	}
	return &Leader{Term: answer.Term, Value: answer.Value}, nil
}

// Observe follows `election`: the channel receives the current leader first (nil for none), then
// every change in the order they happened. It closes when ctx ends or the stream fails; the
// returned function then reports why.
func Observe(ctx context.Context, conn grpc.ClientConnInterface, election string) (<-chan *Leader, func() error, error) {
	stream, err := pb.NewElectionServiceClient(conn).Observe(ctx, &pb.ObserveRequest{Election: election})
	if err != nil {
		return nil, nil, refusal(err)
	}
	changes := make(chan *Leader)
	var failure error
	go func() {
		defer close(changes)
		for {
			msg, err := stream.Recv()
			if err != nil {
				failure = refusal(err)
				return
			}
			var leader *Leader
			if msg.HasLeader {
				leader = &Leader{Term: msg.Term, Value: msg.Value}
			}
			select {
			case changes <- leader:
			case <-ctx.Done():
				failure = ctx.Err()
				return
			}
		}
	}()
	return changes, func() error { return failure }, nil
}
