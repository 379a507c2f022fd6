package leasehold

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A server that predates valid_to_ms (0): the validity counts from receipt alone.
func TestVouchedUntilWithoutValidToCountsFromReceipt(t *testing.T) {
	received := time.Now()
	opened := received.Add(-time.Hour) // long ago: would be past if valid_to counted
	got := vouchedUntil(opened, received, 1500, 0)
	if want := received.Add(1500 * time.Millisecond); !got.Equal(want) {
		t.Fatalf("vouchedUntil = %v, want %v (receipt + valid_for)", got, want)
	}
}

// A message held up on its way (the stream opened long ago, a small valid_to): its validity
// has already passed on receipt, however long valid_for_ms says from then.
func TestVouchedUntilOfAStaleMessageHasPassed(t *testing.T) {
	received := time.Now()
	opened := received.Add(-time.Minute)
	got := vouchedUntil(opened, received, 10_000, 5_000)
	if want := opened.Add(5 * time.Second); !got.Equal(want) {
		t.Fatalf("vouchedUntil = %v, want %v (opened + valid_to)", got, want)
	}
	if got.After(received) {
		t.Fatalf("a stale message vouches until %v, after its receipt %v", got, received)
	}
}

// A message on time: the earlier of receipt + valid_for and opened + valid_to.
func TestVouchedUntilIsTheEarlierOfTheTwo(t *testing.T) {
	received := time.Now()
	opened := received.Add(-200 * time.Millisecond)
	for _, c := range []struct {
		validForMs uint32
		validToMs  uint64
		want       time.Time
	}{
		// valid_to from opening ends first: the server received the stream well before now.
		{validForMs: 10_000, validToMs: 9_000, want: opened.Add(9 * time.Second)},
		// valid_for from receipt ends first.
		{validForMs: 10_000, validToMs: 20_000, want: received.Add(10 * time.Second)},
		// Both at once.
		{validForMs: 10_000, validToMs: 10_200, want: received.Add(10 * time.Second)},
	} {
		t.Run(fmt.Sprintf("for%d/to%d", c.validForMs, c.validToMs), func(t *testing.T) {
			got := vouchedUntil(opened, received, c.validForMs, c.validToMs)
			if !got.Equal(c.want) {
				t.Fatalf("vouchedUntil = %v, want %v", got, c.want)
			}
			if !got.After(received) {
				t.Fatalf("a message on time vouches only until %v, not after its receipt %v", got, received)
			}
		})
	}
}

// A valid_to_ms beyond what a time.Duration holds does not wrap around into the past.
func TestVouchedUntilWithAHugeValidToCountsFromReceipt(t *testing.T) {
	received := time.Now()
	for _, validToMs := range []uint64{maxValidToMs, maxValidToMs + 1, ^uint64(0)} {
		got := vouchedUntil(received, received, 1500, validToMs)
		if want := received.Add(1500 * time.Millisecond); !got.Equal(want) {
			t.Fatalf("valid_to_ms %d: vouchedUntil = %v, want %v", validToMs, got, want)
		}
	}
}

// A stale answer is ErrStale, and neither a broken stream to resume nor a server's refusal.
func TestStaleErrorIsErrStaleAndNotTransient(t *testing.T) {
	err := error(staleError(staleElected))
	if !errors.Is(err, ErrStale) || !errors.Is(fmt.Errorf("wrapped: %w", err), ErrStale) {
		t.Fatalf("errors.Is(%v, ErrStale) does not hold", err)
	}
	if transient(err) {
		t.Fatal("a stale answer is taken for a broken stream (it would be retried)")
	}
	if got := describe(err); got != staleElected {
		t.Fatalf("describe = %q, want %q", got, staleElected)
	}
}
