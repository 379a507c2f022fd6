package main

import (
	"strings"
	"testing"
)

func TestMeasure(t *testing.T) {
	cases := []struct {
		name      string
		intervals []interval
		limit     int
		want      overlaps
	}{
		{"touching intervals do not overlap", []interval{{0, 10}, {10, 20}}, 1,
			overlaps{beliefs: 2, most: 1}},
		{"empty intervals count for nothing", []interval{{0, 10}, {5, 5}, {7, 3}}, 1,
			overlaps{beliefs: 3, most: 1}},
		{"two overlaps of a mutex", []interval{{0, 10}, {5, 12}, {20, 30}, {25, 26}}, 1,
			overlaps{beliefs: 4, count: 2, longest: 5, most: 2}},
		{"a span of overlaps is measured whole", []interval{{0, 10}, {5, 15}, {8, 20}}, 1,
			overlaps{beliefs: 3, count: 1, longest: 10, most: 3}},
		{"two of a 2-permit semaphore", []interval{{0, 10}, {5, 12}}, 2,
			overlaps{beliefs: 2, most: 2}},
		{"three of a 2-permit semaphore", []interval{{0, 10}, {5, 12}, {8, 30}}, 2,
			overlaps{beliefs: 3, count: 1, longest: 2, most: 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := measure(c.intervals, c.limit); got != c.want {
				t.Errorf("measure = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestBeliefs(t *testing.T) {
	h := history(
		op(0, Acquire, OK, 0, 10, 1, 0),
		op(1, Acquire, Refused, 0, 50, 0, 0),
		op(0, Release, OK, 30, 40, 1, 0),
		op(0, Acquire, OK, 50, 60, 2, 0), // never ends: lasts until the history does
		op(1, Lost, OK, 70, 90, 7, 0),    // matches nothing
	)
	intervals, unmatched := holding.beliefs(h)
	want := []interval{{10, 30}, {60, 90}}
	if len(intervals) != len(want) || intervals[0] != want[0] || intervals[1] != want[1] {
		t.Errorf("intervals = %v, want %v", intervals, want)
	}
	if unmatched != 1 {
		t.Errorf("unmatched = %d, want 1", unmatched)
	}
}

func TestOverlapCheck(t *testing.T) {
	overlapping := func() *History {
		return history(
			op(0, Acquire, OK, 0, 1_000_000, 1, 0),
			op(1, Acquire, OK, 0, 2_000_000, 2, 0),
			op(0, Lost, OK, 4_500_000, 4_500_000, 1, 0),
			op(1, Release, OK, 6_000_000, 6_100_000, 2, 0),
		)
	}
	h := overlapping()
	r := holding.check(h, 1)
	if r.status != failed || !strings.Contains(r.line, "1 overlap with more than 1 holder, longest 2.500 ms") {
		t.Errorf("without data loss: %v %q", r.status, r.line)
	}
	h.DataLoss, h.RenewalMs = true, 1 // a bound of 151 ms
	if r := holding.check(h, 1); r.status != permitted || !strings.Contains(r.line, "permitted by the fault (data loss): within the bound of 151.000 ms") {
		t.Errorf("with data loss: %v %q", r.status, r.line)
	}
	if r := holding.check(h, 2); r.status != passed {
		t.Errorf("with 2 permits: %v %q", r.status, r.line)
	}
	if r := leading.check(h, 1); r.status != passed || !strings.HasSuffix(r.line, "no ops") {
		t.Errorf("leadership: %v %q", r.status, r.line)
	}
	leaders := history(
		op(0, Campaign, OK, 0, 10, 1, 0),
		op(1, Campaign, OK, 20, 30, 2, 0),
		op(0, Resign, OK, 40, 50, 1, 0),
	)
	if r := leading.check(leaders, 1); r.status != failed || !strings.Contains(r.line, "more than 1 leader") {
		t.Errorf("two leaders: %v %q", r.status, r.line)
	}
}

// With data loss an overlap is permitted up to one renewal period plus detectionSlack (the
// holder hears of the loss at its server's next renewal), and fails beyond it.
func TestDataLossOverlapIsBounded(t *testing.T) {
	const ms = int64(1_000_000)
	// Client 1 takes the lock 10 ms after client 0, whose key Redis lost; client 0 stops
	// believing `after` later.
	lostAfter := func(after int64) *History {
		h := history(
			op(0, Acquire, OK, 0, 1*ms, 1, 0),
			op(1, Acquire, OK, 5*ms, 10*ms, 2, 0),
			op(0, Lost, OK, 10*ms+after, 10*ms+after, 1, 0),
			op(1, Release, OK, 2000*ms, 2001*ms, 2, 0),
		)
		h.DataLoss, h.RenewalMs = true, 167
		return h
	}
	bound := 167*ms + detectionSlack
	for _, c := range []struct {
		name  string
		after int64
		want  status
		says  string
	}{
		{"well within", 20 * ms, permitted, "longest 20.000 ms, at most 2 at once (2 beliefs), permitted by the fault (data loss): within the bound of 317.000 ms (one renewal period, 167 ms, plus 150 ms to hear of it)"},
		{"at the bound", bound, permitted, "within the bound of 317.000 ms"},
		{"just beyond", bound + 1, failed, "NOT allowed even with data loss: 317.000 ms is beyond the bound of 317.000 ms"},
		{"a holder renewing a key not its own", 600 * ms, failed, "longest 600.000 ms, at most 2 at once (2 beliefs), NOT allowed even with data loss: 600.000 ms is beyond the bound of 317.000 ms (one renewal period, 167 ms, plus 150 ms to hear of it), so a holder went on believing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := holding.check(lostAfter(c.after), 1)
			if r.status != c.want || !strings.Contains(r.line, c.says) {
				t.Errorf("%v %q, want %v saying %q", r.status, r.line, c.want, c.says)
			}
		})
	}
	// The same bound holds for leaders.
	leaders := history(
		op(0, Campaign, OK, 0, 1*ms, 1, 0),
		op(1, Campaign, OK, 5*ms, 10*ms, 2, 0),
		op(0, Resign, OK, 610*ms, 611*ms, 1, 0),
	)
	leaders.DataLoss, leaders.RenewalMs = true, 167
	if r := leading.check(leaders, 1); r.status != failed || !strings.Contains(r.line, "so a leader went on believing") {
		t.Errorf("leaders: %v %q", r.status, r.line)
	}
}
