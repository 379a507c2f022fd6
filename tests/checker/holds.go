package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// change is the start (acquire, campaign) or the end (release, lost, resign) of a client's
// hold of the lock or of its leadership.
type change struct {
	Kind   Kind
	Client int
	Token  uint64
}

func (c change) String() string {
	if c.Kind == Acquire {
		return fmt.Sprintf("w%d acquire → t%d", c.Client, c.Token)
	}
	return fmt.Sprintf("w%d %s t%d", c.Client, c.Kind, c.Token)
}

// holds is the set of holds believed held, sorted so that equal sets are equal slices.
// Steps return a new slice: Porcupine's states must not be mutated.
type holds []grant

// holdsModel checks the lock as clients believe in it: a mutex (limit 1) or a semaphore of
// limit permits. An acquisition that succeeded adds the client's hold, a release or loss
// removes it, and no more than limit may be held at once.
func holdsModel(limit int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return holds(nil) },
		Step: func(state, input, _ any) (bool, any) {
			return stepHolds(limit, state.(holds), input.(change))
		},
		Equal: func(a, b any) bool { return slices.Equal(a.(holds), b.(holds)) },
		Hash: func(state any) uint64 {
			var h uint64 = 14695981039346656037
			for _, g := range state.(holds) {
				h = (h ^ uint64(g.Client)) * 1099511628211
				h = (h ^ g.Token) * 1099511628211
			}
			return h
		},
		DescribeOperation: func(input, _ any) string { return input.(change).String() },
		DescribeState: func(state any) string {
			held := state.(holds)
			if len(held) == 0 {
				return "free"
			}
			parts := make([]string, len(held))
			for i, g := range held {
				parts[i] = fmt.Sprintf("w%d t%d", g.Client, g.Token)
			}
			return fmt.Sprintf("%d/%d held: %s", len(held), limit, strings.Join(parts, ", "))
		},
	}
}

func stepHolds(limit int, held holds, c change) (bool, any) {
	g := grant{Client: c.Client, Token: c.Token}
	at, found := slices.BinarySearchFunc(held, g, compareGrants)
	if c.Kind == Acquire {
		if found || len(held) >= limit {
			return false, held
		}
		return true, slices.Insert(slices.Clone(held), at, g)
	}
	if !found {
		return false, held // ended a hold that was not held
	}
	return true, slices.Delete(slices.Clone(held), at, at+1)
}

func compareGrants(a, b grant) int {
	return cmp.Or(cmp.Compare(a.Client, b.Client), cmp.Compare(a.Token, b.Token))
}

// holdsName names the lock check after what the lock is.
func holdsName(limit int) string {
	if limit == 1 {
		return "mutex"
	}
	return "semaphore"
}

// changeOps are the history's successful starts of the given kind (acquire or campaign)
// and all ends of the given kinds. An acquisition refused or of unknown outcome is left
// out: the client does not believe it holds. An end counts whatever its outcome: its call
// is the instant the client stopped believing.
func changeOps(h *History, start Kind, ends ...Kind) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, op := range h.Operations {
		var ret int64
		switch {
		case op.Kind == start && op.Outcome == OK:
			ret = op.returned()
		case slices.Contains(ends, op.Kind):
			ret = op.ended()
		default:
			continue
		}
		ops = append(ops, porcupine.Operation{
			ClientId: op.Client,
			Input:    change{Kind: op.Kind, Client: op.Client, Token: op.Token},
			Call:     op.Call,
			Return:   ret,
		})
	}
	return ops
}
