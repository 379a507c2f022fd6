package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Shared marks, in an acquisition's value, a shared hold of a read-write lock (a reader);
// every other acquisition holds exclusively. A history with one shared acquisition is a
// read-write lock's: many shared holders at once, or one exclusive holder alone.
const Shared uint64 = 1

// readWrite tells whether h is a read-write lock's history.
func readWrite(h *History) bool {
	return slices.ContainsFunc(h.Operations, func(op Op) bool {
		return op.Kind == Acquire && op.Value == Shared
	})
}

// rwChange is the start or end of a hold of a read-write lock; an end finds its hold's
// mode in the state.
type rwChange struct {
	change
	Shared bool
}

func (c rwChange) String() string {
	if c.Kind == Acquire && c.Shared {
		return c.change.String() + " shared"
	}
	return c.change.String()
}

// rwHold is one hold of a read-write lock.
type rwHold struct {
	grant
	Shared bool
}

// rwHolds is the set of holds believed held, sorted by grant; steps return a new slice.
type rwHolds []rwHold

// rwlockModel checks a read-write lock as clients believe in it: a shared acquisition is
// legal while no exclusive hold is held, an exclusive one only while nothing is held.
var rwlockModel = porcupine.Model{
	Init: func() any { return rwHolds(nil) },
	Step: func(state, input, _ any) (bool, any) {
		held, c := state.(rwHolds), input.(rwChange)
		h := rwHold{grant: grant{Client: c.Client, Token: c.Token}, Shared: c.Shared}
		at, found := slices.BinarySearchFunc(held, h, func(a, b rwHold) int { return compareGrants(a.grant, b.grant) })
		if c.Kind != Acquire {
			if !found {
				return false, held // ended a hold that was not held
			}
			return true, slices.Delete(slices.Clone(held), at, at+1)
		}
		exclusive := slices.ContainsFunc(held, func(h rwHold) bool { return !h.Shared })
		if found || exclusive || (!c.Shared && len(held) > 0) {
			return false, held
		}
		return true, slices.Insert(slices.Clone(held), at, h)
	},
	Equal:             func(a, b any) bool { return slices.Equal(a.(rwHolds), b.(rwHolds)) },
	DescribeOperation: func(input, _ any) string { return input.(rwChange).String() },
	DescribeState: func(state any) string {
		held := state.(rwHolds)
		if len(held) == 0 {
			return "free"
		}
		parts := make([]string, len(held))
		for i, h := range held {
			mode := "exclusive"
			if h.Shared {
				mode = "shared"
			}
			parts[i] = fmt.Sprintf("w%d t%d %s", h.Client, h.Token, mode)
		}
		return strings.Join(parts, ", ")
	},
}

// rwlockOps are the history's successful acquisitions and all ends of holds, as changeOps
// picks them, each acquisition with its mode.
func rwlockOps(h *History) []porcupine.Operation {
	ops := changeOps(h, Acquire, Release, Lost)
	for i := range ops {
		c := ops[i].Input.(change)
		ops[i].Input = rwChange{change: c}
	}
	// changeOps keeps the history's order: match each acquisition back to its op's value.
	shared := map[grant]bool{}
	for _, op := range h.Operations {
		if op.Kind == Acquire && op.Outcome == OK && op.Value == Shared {
			shared[grant{Client: op.Client, Token: op.Token}] = true
		}
	}
	for i := range ops {
		c := ops[i].Input.(rwChange)
		if c.Kind == Acquire {
			c.Shared = shared[grant{Client: c.Client, Token: c.Token}]
			ops[i].Input = c
		}
	}
	return ops
}

// lockCheck is the model check of the lock: a read-write lock's model for a read-write
// lock's history, else the mutex or semaphore of h.LockLimit.
func lockCheck(h *History, mustPass bool) modelCheck {
	if readWrite(h) {
		return modelCheck{name: "rwlock", model: rwlockModel, ops: rwlockOps(h), mustPass: mustPass}
	}
	return modelCheck{name: holdsName(h.LockLimit), model: holdsModel(h.LockLimit), ops: changeOps(h, Acquire, Release, Lost), mustPass: mustPass}
}

// lockOverlap is the interval check of the lock: for a read-write lock, no exclusive belief
// overlaps any other belief; else at most h.LockLimit beliefs at once.
func lockOverlap(h *History) result {
	if !readWrite(h) {
		return holding.check(h, h.LockLimit)
	}
	prefix := fmt.Sprintf("%s overlap: ", h.Run)
	intervals, shared := rwBeliefs(h)
	if len(intervals) == 0 {
		return result{line: prefix + "no ops", status: passed}
	}
	count, longest := 0, int64(0)
	for i, a := range intervals {
		for j := i + 1; j < len(intervals); j++ {
			b := intervals[j]
			if shared[i] && shared[j] {
				continue
			}
			if over := min(a.end, b.end) - max(a.start, b.start); over > 0 {
				count++
				longest = max(longest, over)
			}
		}
	}
	line := fmt.Sprintf("%sno exclusive holder beside another (%d beliefs)", prefix, len(intervals))
	st := passed
	if count > 0 {
		line = fmt.Sprintf("%s%d %s of an exclusive holder with another, longest %.3f ms (%d beliefs)",
			prefix, count, plural(count, "overlap", "overlaps"), float64(longest)/1e6, len(intervals))
		st = failed
		if h.DataLoss {
			line += ", permitted by the fault (data loss)"
			st = permitted
		} else {
			line += ", NOT allowed"
		}
	}
	return result{line: line, status: st}
}

// rwBeliefs pairs each successful acquisition with the same client's next end of the same
// token, as holding.beliefs does, and says which beliefs were shared.
func rwBeliefs(h *History) ([]interval, []bool) {
	ops := slices.Clone(h.Operations)
	slices.SortStableFunc(ops, func(a, b Op) int {
		return cmp.Or(cmp.Compare(a.Call, b.Call), cmp.Compare(rank(a, Acquire), rank(b, Acquire)))
	})
	last := h.end()
	var intervals []interval
	var shared []bool
	open := map[grant][]int{}
	for _, op := range ops {
		g := grant{Client: op.Client, Token: op.Token}
		switch {
		case op.Kind == Acquire && op.Outcome == OK:
			open[g] = append(open[g], len(intervals))
			intervals = append(intervals, interval{start: *op.Return, end: last})
			shared = append(shared, op.Value == Shared)
		case op.Kind == Release || op.Kind == Lost:
			if len(open[g]) == 0 {
				continue // the model reports it
			}
			intervals[open[g][0]].end = op.Call
			open[g] = open[g][1:]
		}
	}
	return intervals, shared
}

// rwGrant is a fencing token granted for a shared or an exclusive hold.
type rwGrant struct {
	grant
	Shared bool
}

// rwTokens is the highest token granted, and the highest granted for an exclusive hold.
type rwTokens struct {
	highest, exclusive uint64
}

// rwTokensModel checks a read-write lock's fencing tokens as fencing needs them: an
// exclusive hold's token is above every token granted before it, a shared hold's above every
// exclusive hold's before it and not below any shared one's. Two readers may share a token:
// on Redlock a token is the highest of a majority's counters, and two readers granted at
// once on different majorities can get the same one (a writer's majority meets each
// reader's on a primary, so writers stay fenced).
var rwTokensModel = porcupine.Model{
	Init: func() any { return rwTokens{} },
	Step: func(state, input, _ any) (bool, any) {
		t, g := state.(rwTokens), input.(rwGrant)
		if g.Shared {
			if g.Token <= t.exclusive || g.Token < t.highest {
				return false, t
			}
			return true, rwTokens{highest: g.Token, exclusive: t.exclusive}
		}
		if g.Token <= t.highest {
			return false, t
		}
		return true, rwTokens{highest: g.Token, exclusive: g.Token}
	},
	DescribeOperation: func(input, _ any) string {
		g := input.(rwGrant)
		mode := "exclusive"
		if g.Shared {
			mode = "shared"
		}
		return fmt.Sprintf("w%d acquire → t%d %s", g.Client, g.Token, mode)
	},
	DescribeState: func(state any) string {
		t := state.(rwTokens)
		return fmt.Sprintf("highest t%d, highest exclusive t%d", t.highest, t.exclusive)
	},
}

// tokensCheck is the check of the fencing tokens of acquisitions: for a read-write lock's
// history, as rwTokensModel allows; else each above every one before it.
func tokensCheck(h *History) modelCheck {
	ops := grantOps(h, Acquire)
	if !readWrite(h) {
		return modelCheck{name: "tokens", model: tokensModel, ops: ops, mustPass: true}
	}
	for i := range ops {
		g := ops[i].Input.(grant)
		ops[i].Input = rwGrant{grant: g}
	}
	shared := map[grant]bool{}
	for _, op := range h.Operations {
		if op.Kind == Acquire && op.Outcome == OK && op.Value == Shared {
			shared[grant{Client: op.Client, Token: op.Token}] = true
		}
	}
	for i := range ops {
		g := ops[i].Input.(rwGrant)
		g.Shared = shared[g.grant]
		ops[i].Input = g
	}
	return modelCheck{name: "tokens", model: rwTokensModel, ops: ops, mustPass: true}
}
