// The leases a session holds, as its callers see them: a lock (SessionLease) and a leadership
// (SessionLeader), each with its own Lost and validity.

package leasehold

import (
	"context"
	"sync"
)

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
	FencingToken uint64 // the first name's (Fences[0]'s)
	Token        string // also the lease's resume token
	// Fences is each name's fencing token: Name first, then LockOptions.MoreNames, in the order
	// asked. A lease of one name has one.
	Fences []Fence
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
