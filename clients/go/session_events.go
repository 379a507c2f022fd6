// What the server says on a session's stream (acquired, kept alive, failed, lost, ...), and the
// validity each lease is believed for by this process's clock.

package leasehold

import (
	"errors"
	"fmt"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

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
				s.armAt(e.hold.vouched(until)) // (no further than its ceiling)
			}
		}
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
			s.loseEntry(e, fromWire(event.LeaseLost.Code), event.LeaseLost.Reason, false)
		}
	case *pb.SessionResponse_Failed:
		s.failed(event.Failed)
	case *pb.SessionResponse_Closed:
		s.outcome = &sessionOutcome{closed: true, err: ErrSessionClosed}
	case *pb.SessionResponse_Lost:
		s.loseSession(fromWire(event.Lost.Code), event.Lost.Reason, nil)
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
			s.loseEntry(e, LostUnreachable, "resumed, but the news arrived after its validity had run out", true)
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
			s.loseEntry(e, LostTaken, fmt.Sprintf("resumed with fencing token %d instead of %d", acquired.FencingToken, e.fencingToken), true)
			return
		}
	} else {
		e.held, e.token, e.fencingToken = true, acquired.Token, acquired.FencingToken
		if e.acquire != nil {
			e.fences = fencesOr(fences(acquired.Fences), e.acquire.Name, acquired.FencingToken)
		}
	}
	e.confirmed = true
	// A ceiling already reached loses it at once, for MAX_HOLD (expire).
	s.armAt(e.hold.vouched(until))
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
		s.loseEntry(e, refusedResume(err), "could not resume the lease: "+describe(err), false, err)
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

// loseEntry: one lease is lost for `reason`, said in `message` (and caused by causes). Lost on
// this side (by its validity, a stale or wrong resume), it is let go on the server too.
func (s *Session) loseEntry(e *sessionEntry, reason LostReason, message string, letGo bool, causes ...error) {
	delete(s.entries, e.id)
	if letGo {
		s.sendRelease(e)
	}
	err := lostBy(e.hold.what, reason, message, causes...)
	if e.result != nil { // a leadership lost as it was won
		e.result <- err
		e.result = nil
	}
	if e.held {
		e.hold.loseBy(err)
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
			code, reason := e.hold.ranOut(LostUnreachable, reason)
			s.loseEntry(e, code, reason, true)
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
