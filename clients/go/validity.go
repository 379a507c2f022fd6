package leasehold

import (
	"errors"
	"math"
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
