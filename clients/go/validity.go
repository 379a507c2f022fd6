package leasehold

import (
	"errors"
	"math"
	"sync"
	"time"
)

// ErrStale: the server's `acquired` or `elected` arrived after the validity it vouched for had
// already run out, held up on its way (a partition that heals delivers old messages late). It
// is no lease and no leadership: the lock may be someone else's, or another may lead, by now.
// Acquire returns an error for which errors.Is(err, ErrStale) holds, as does Candidate.Elected.
var ErrStale = errors.New("leasehold: the news arrived after its validity had run out")

// staleError: an `acquired` or `elected` that arrived too late to be believed (ErrStale).
type staleError string

func (e staleError) Error() string { return string(e) }

// Is makes errors.Is(err, ErrStale) hold.
func (e staleError) Is(target error) bool { return target == ErrStale }

// maxValidToMs is the largest valid_to_ms a time.Duration holds; one beyond it ends no sooner
// than valid_for_ms from receipt does.
const maxValidToMs = uint64(math.MaxInt64 / int64(time.Millisecond))

// vouchedUntil is until when a message received at `received` vouches for a lease or a
// leadership, on this process's clock: validForMs from its receipt, and never past validToMs
// after `opened`, the moment just before the client opened the message's stream (the server
// counts validToMs from when the stream reached it, which is later). That bound still holds
// when the message was held up on its way: a healed partition delivers old messages late, and
// one read as fresh would keep its client believing past the lock's key. validToMs 0: a server
// that predates it, so receipt alone counts.
func vouchedUntil(opened, received time.Time, validForMs uint32, validToMs uint64) time.Time {
	until := received.Add(time.Duration(validForMs) * time.Millisecond)
	if validToMs == 0 || validToMs > maxValidToMs {
		return until
	}
	if end := opened.Add(time.Duration(validToMs) * time.Millisecond); end.Before(until) {
		return end
	}
	return until
}

// resumeGrace is the grace asked for: the one given, else the TTL when resumption is on (the
// server may then keep the lease that long for its client to resume), else none.
func resumeGrace(given, ttl time.Duration, noResume bool) time.Duration {
	if given == 0 && !noResume {
		return ttl
	}
	return given
}

// belief is what this process believes of a lease (or a leadership) it holds: until when the
// server last vouched for it, and whether, and why, it can no longer be trusted. A Lease, a
// SessionLease and a SessionLeader each embed one, which gives them Lost, LostReason, Err and
// ValidUntil.
type belief struct {
	lost chan struct{} // closed once, by lose
	what string        // "lease", "leadership": how its LostError begins

	mu         sync.Mutex // guards why, validUntil and ceiling
	why        *LostError
	validUntil time.Time
	// ceiling is when its max hold ends by this process's clock (zero: none): the moment the
	// acquire was sent plus MaxHold. The server counts from its acquisition, which is later, so
	// no validity it vouches for is believed past this.
	ceiling time.Time
}

// newBelief is a belief in a `what` not yet lost, vouched for until nothing.
func newBelief(what string) belief { return belief{lost: make(chan struct{}), what: what} }

// Lost is closed once the lease can no longer be trusted.
func (b *belief) Lost() <-chan struct{} { return b.lost }

// LostReason says why Lost was closed, in words (Err gives the reason as a type).
func (b *belief) LostReason() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.why == nil {
		return ""
	}
	return b.why.Message
}

// Err is nil until Lost is closed, then a *LostError saying why, whose Reason programs branch
// on: errors.Is(lease.Err(), LostRevoked).
func (b *belief) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.why == nil {
		return nil
	}
	return b.why
}

// ValidUntil is how long the server last vouched for the lease (on this process's monotonic
// clock): the moment it last confirmed the lease (its acquisition, then every renewal confirmed
// after it; on a session, a renewal of the session) plus the validity it gave. Lost is closed by
// then unless a later confirmation moves it.
func (b *belief) ValidUntil() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.validUntil
}

// vouched records until when the server now vouches for the lease (see vouchedUntil), never
// past its ceiling, and returns what it now believes.
func (b *belief) vouched(until time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ceiling.IsZero() && until.After(b.ceiling) {
		until = b.ceiling
	}
	b.validUntil = until
	return until
}

// capAt sets the ceiling to maxHold from `sent`, the moment the acquire was (or is about to be)
// sent: once, so that an acquire asked for again (a session's wait on a new stream) keeps the
// first. A maxHold of 0 is none.
func (b *belief) capAt(sent time.Time, maxHold time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if maxHold > 0 && b.ceiling.IsZero() {
		b.ceiling = sent.Add(maxHold)
	}
}

// ranOut is why a lease whose validity has run out is lost: MAX_HOLD when it ran out at its
// ceiling (this process's clock reached the max hold first; the server's `lost` would say the
// same a moment later), else `reason`, in `message`.
func (b *belief) ranOut(reason LostReason, message string) (LostReason, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ceiling.IsZero() && !b.validUntil.Before(b.ceiling) {
		return LostMaxHold, "the " + b.what + " reached its max hold (MaxHold)"
	}
	return reason, message
}

// lose closes Lost for `reason`, saying why in `message` (the first loss stays); causes (nil
// ones left out) are what the LostError wraps besides the reason.
func (b *belief) lose(reason LostReason, message string, causes ...error) {
	b.loseBy(lostBy(b.what, reason, message, causes...))
}

// loseBy closes Lost with why (the first loss stays).
func (b *belief) loseBy(why *LostError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.lost:
	default:
		b.why = why.as(b.what)
		close(b.lost)
	}
}

// isLost: Lost is closed.
func (b *belief) isLost() bool {
	select {
	case <-b.lost:
		return true
	default:
		return false
	}
}
