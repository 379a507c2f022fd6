// The session's goroutine: its loop, and the calls it runs for the session's callers (add a
// lease, let one go, proclaim, close), each sent on the current stream.

package leasehold

import (
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

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
				s.loseSession(LostUnreachable, "could not resume the session before its grace ran out: "+describe(s.lastErr), nil)
			} else {
				s.resumeBy = time.Time{} // a new stream is open: it says how it goes
			}
		case <-ctxDone:
			ctxDone = nil
			s.startClose()
		case <-s.closeByC:
			s.loseSession(LostUnreachable, "the session's close was not confirmed in time: its leases expire by their TTL", nil)
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
			e.hold.loseBy(o.lost)
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

// loseSession ends the session as lost (once), for `reason`, saying why in `message`: its error,
// and every lease's still held, is a *LostError that wraps ErrSessionLost and the cause.
func (s *Session) loseSession(reason LostReason, message string, cause error) {
	if s.outcome != nil {
		return
	}
	lost := lostBy("session", reason, message, ErrSessionLost, refusal(cause))
	s.outcome = &sessionOutcome{reason: message, lost: lost, err: lost}
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
		if err := h.Err(); err != nil {
			reply <- err
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
		acquire = &pb.SessionAcquire{Id: e.id, Name: e.acquire.Name, MoreNames: e.acquire.MoreNames, ResumeToken: e.token}
	} else {
		e.hold.capAt(time.Now(), fromMillis(acquire.MaxHoldMs)) // once: the first time it is sent
	}
	if !e.held && acquire.WaitMs > 0 {
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
