package main

import (
	"cmp"
	"fmt"
	"slices"
)

// interval is one belief: a hold of the lock or a leadership, from the instant the
// acquisition (or campaign) returned to the instant the client stopped believing.
type interval struct {
	start, end int64
}

// believing says which operations start and end one kind of belief, and how to name it.
type believing struct {
	name      string // the name of its overlap check
	one, many string // what one or many believers are called
	start     Kind
	ends      []Kind
}

var (
	holding = believing{name: "overlap", one: "holder", many: "holders", start: Acquire, ends: []Kind{Release, Lost}}
	leading = believing{name: "leader overlap", one: "leader", many: "leaders", start: Campaign, ends: []Kind{Resign}}
)

// beliefs pairs each successful start (acquire or campaign) with the same client's next end
// of the same token. A belief that never ended lasts until the history does. unmatched
// counts ends that match no start: the lock model reports them as illegal steps.
func (b believing) beliefs(h *History) (intervals []interval, unmatched int) {
	start, ends, last := b.start, b.ends, h.end()
	ops := slices.Clone(h.Operations)
	// By call, and starts before ends called at the same instant.
	slices.SortStableFunc(ops, func(a, b Op) int {
		return cmp.Or(cmp.Compare(a.Call, b.Call), cmp.Compare(rank(a, start), rank(b, start)))
	})
	open := map[grant][]int{} // indices into intervals, oldest first
	for _, op := range ops {
		g := grant{Client: op.Client, Token: op.Token}
		switch {
		case op.Kind == start && op.Outcome == OK:
			open[g] = append(open[g], len(intervals))
			intervals = append(intervals, interval{start: *op.Return, end: last})
		case slices.Contains(ends, op.Kind):
			if len(open[g]) == 0 {
				unmatched++
				continue
			}
			intervals[open[g][0]].end = op.Call
			open[g] = open[g][1:]
		}
	}
	return intervals, unmatched
}

func rank(op Op, start Kind) int {
	if op.Kind == start {
		return 0
	}
	return 1
}

// overlaps measures the spans in which more than the limit believed at once.
type overlaps struct {
	beliefs int
	count   int   // how many separate spans had more than the limit at once
	longest int64 // the longest such span, ns
	most    int   // the most that believed at once
}

// measure sweeps the intervals' ends in time order. Intervals that merely touch (one ends
// at the instant another starts) do not overlap, and an empty interval counts for nothing.
func measure(intervals []interval, limit int) overlaps {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, iv := range intervals {
		if iv.end > iv.start {
			edges = append(edges, edge{iv.start, +1}, edge{iv.end, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta))
	})
	o := overlaps{beliefs: len(intervals)}
	active, since := 0, int64(0)
	for _, e := range edges {
		before := active
		active += e.delta
		o.most = max(o.most, active)
		switch {
		case before <= limit && active > limit:
			since = e.at
		case before > limit && active <= limit:
			o.count++
			o.longest = max(o.longest, e.at-since)
		}
	}
	return o
}

// check is the interval check, which needs no search: at no instant may more than
// limit clients believe they hold (or lead). With data loss, overlaps are permitted (and
// reported) up to the history's permittedOverlap: the believer whose key Redis lost must hear
// of it at its server's next renewal, so a longer overlap is a bug, whatever the fault.
func (b believing) check(h *History, limit int) result {
	prefix := fmt.Sprintf("%s %s: ", h.Run, b.name)
	intervals, unmatched := b.beliefs(h)
	if len(intervals) == 0 {
		return result{line: prefix + "no ops", status: passed}
	}
	o := measure(intervals, limit)
	noun := plural(limit, b.one, b.many)
	line := fmt.Sprintf("%snone beyond %d %s (%d beliefs)", prefix, limit, noun, o.beliefs)
	st := passed
	if o.count > 0 {
		line = fmt.Sprintf("%s%d %s with more than %d %s, longest %.3f ms, at most %d at once (%d beliefs)",
			prefix, o.count, plural(o.count, "overlap", "overlaps"), limit, noun,
			float64(o.longest)/1e6, o.most, o.beliefs)
		st = failed
		switch bound := h.permittedOverlap(); {
		case !h.DataLoss:
			line += ", NOT allowed"
		case o.longest <= bound:
			line += fmt.Sprintf(", permitted by the fault (data loss): within the bound of %s", boundText(h))
			st = permitted
		default:
			line += fmt.Sprintf(", NOT allowed even with data loss: %.3f ms is beyond the bound of %s, so a %s went on believing after its server should have found the loss",
				float64(o.longest)/1e6, boundText(h), b.one)
		}
	}
	if unmatched > 0 {
		line += fmt.Sprintf("; %d %s matched no start", unmatched, plural(unmatched, "end", "ends"))
	}
	return result{line: line, status: st}
}

// boundText names a data-loss history's permitted overlap and how it is made up.
func boundText(h *History) string {
	return fmt.Sprintf("%.3f ms (one renewal period, %d ms, plus %d ms to hear of it)",
		float64(h.permittedOverlap())/1e6, h.RenewalMs, detectionSlack/1_000_000)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
