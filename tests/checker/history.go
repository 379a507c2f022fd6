package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
)

// Kind is what an operation did, as the Rust tests (tests/support/history.rs) name it.
type Kind string

// The kinds of operation a history may hold.
const (
	Acquire  Kind = "acquire"
	Release  Kind = "release"
	Lost     Kind = "lost"
	Read     Kind = "read"
	Write    Kind = "write"
	Campaign Kind = "campaign"
	Resign   Kind = "resign"
)

// Outcome is what the client learned of an operation.
type Outcome string

// The outcomes an operation may have.
const (
	// OK: the operation took effect.
	OK Outcome = "ok"
	// Refused: the operation was refused for a reason the client knows (the wait ran out, a
	// stale fencing token), so it had no effect.
	Refused Outcome = "refused"
	// Unknown: the call failed or timed out; it may or may not have taken effect, then or
	// at any later instant.
	Unknown Outcome = "unknown"
)

// never is the return time given to an operation whose outcome is unknown. A request that
// timed out may still be in flight and take effect at any later instant, so (as etcd's
// robustness tests do) it is treated as returning only after everything else; its model
// step allows it either to have taken effect or not.
const never = math.MaxInt64

// Op is one operation of one client. Times are nanoseconds since the run started.
type Op struct {
	Client  int     `json:"client"`
	Kind    Kind    `json:"kind"`
	Call    int64   `json:"call"`
	Return  *int64  `json:"return"`
	Outcome Outcome `json:"outcome"`
	Token   uint64  `json:"token"`
	Value   uint64  `json:"value"`
}

// History is one run's recorded operations and what the run's fault allows.
type History struct {
	Run string `json:"run"`
	// LockLimit is how many may hold the lock at once: 1 for a mutex, N for a semaphore.
	LockLimit int `json:"lock_limit"`
	// DataLoss is true when the injected fault may make Redis forget a hold, so overlapping
	// holders are reported rather than failed. Fencing must hold regardless.
	DataLoss bool `json:"data_loss"`
	// RenewalMs is the longest renewal period of the run's leases, in ms (src/lease/renewal.rs:
	// a third of the TTL, or of a shorter resume grace). A holder whose key Redis lost hears of
	// it at its server's next renewal, so with data loss two may believe at once for at most
	// about this long (see permittedOverlap). Required with data_loss.
	RenewalMs  int64 `json:"renewal_ms"`
	Operations []Op  `json:"operations"`
}

// detectionSlack is what a data-loss overlap may last beyond one renewal period: the renewal's
// round trip to Redis, the Lost event's way to the client and the client's noticing it. Under
// the tests' load (two cores shared) those take tens of milliseconds at most.
const detectionSlack int64 = 150_000_000 // ns

// permittedOverlap is the longest overlap a data-loss fault may show, ns: one renewal period
// (by then the holder's server has found the key gone or someone else's) plus detectionSlack.
// A longer one means a holder went on believing in a key it no longer had.
func (h *History) permittedOverlap() int64 {
	return h.RenewalMs*1_000_000 + detectionSlack
}

// returned is when op returned; never when its outcome is unknown, even if the call
// errored at a known instant, because the request may still take effect later.
func (op Op) returned() int64 {
	if op.Outcome == Unknown || op.Return == nil {
		return never
	}
	return *op.Return
}

// ended is when an end of a hold or leadership (release, lost, resign) returned. Its call
// is the instant the belief ended whatever became of the request, so a missing return is
// taken as that instant.
func (op Op) ended() int64 {
	if op.Return == nil {
		return op.Call
	}
	return *op.Return
}

// isEnd tells whether op ends a hold (release, lost) or a leadership (resign).
func (op Op) isEnd() bool {
	return op.Kind == Release || op.Kind == Lost || op.Kind == Resign
}

// end is the latest instant the history mentions: holds and leaderships that never ended
// last until then.
func (h *History) end() int64 {
	var last int64
	for _, op := range h.Operations {
		last = max(last, op.Call)
		if op.Return != nil {
			last = max(last, *op.Return)
		}
	}
	return last
}

// readHistory reads and validates a history file. Any error means bad input.
func readHistory(path string) (*History, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseHistory(data)
}

// parseHistory decodes a history and rejects one the checks could only misjudge.
func parseHistory(data []byte) (*History, error) {
	var h History
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("bad JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("bad JSON: data after the history object")
	}
	if err := h.validate(); err != nil {
		return nil, err
	}
	return &h, nil
}

// validate checks the fields the models rely on.
func (h *History) validate() error {
	if h.LockLimit < 1 {
		return fmt.Errorf("lock_limit %d: must be at least 1", h.LockLimit)
	}
	if h.RenewalMs < 0 || h.DataLoss && h.RenewalMs == 0 {
		return fmt.Errorf("renewal_ms %d: with data_loss it must be the leases' renewal period (it bounds a permitted overlap)", h.RenewalMs)
	}
	for i, op := range h.Operations {
		if err := op.validate(); err != nil {
			return fmt.Errorf("operation %d: %w", i, err)
		}
	}
	return nil
}

func (op Op) validate() error {
	switch op.Kind {
	case Acquire, Release, Lost, Read, Write, Campaign, Resign:
	default:
		return fmt.Errorf("unknown kind %q", op.Kind)
	}
	switch op.Outcome {
	case OK, Refused, Unknown:
	default:
		return fmt.Errorf("unknown outcome %q", op.Outcome)
	}
	if op.Client < 0 {
		return fmt.Errorf("negative client %d", op.Client)
	}
	if op.Return == nil {
		if op.Outcome != Unknown && !op.isEnd() {
			return fmt.Errorf("%s %s with no return time (only an unknown outcome may lack one)", op.Kind, op.Outcome)
		}
	} else if *op.Return < op.Call {
		return fmt.Errorf("returned at %d before it was called at %d", *op.Return, op.Call)
	}
	return nil
}
