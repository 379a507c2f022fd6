package main

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/anishathalye/porcupine"
)

// register is the fenced resource: a register in Redis that refuses a token lower than the
// highest it has seen. It starts absent (value 0), having seen token 0.
type register struct {
	highest uint64
	value   uint64
}

// access is one read or write of the register: Value is what a write wrote or what a read
// returned.
type access struct {
	Kind    Kind
	Token   uint64
	Value   uint64
	Outcome Outcome
}

// registerModel is nondeterministic because an access with an unknown outcome may or may
// not have taken effect; the power-set construction of ToModel tracks both possibilities.
var registerModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{register{}} },
	Step: func(state, input, _ any) []any {
		return stepRegister(state.(register), input.(access))
	},
	Hash: func(state any) uint64 {
		r := state.(register)
		return r.highest*0x9e3779b97f4a7c15 ^ r.value
	},
	DescribeOperation: func(input, _ any) string { return describeAccess(input.(access)) },
	DescribeState: func(state any) string {
		r := state.(register)
		return fmt.Sprintf("t%d = %d", r.highest, r.value)
	},
}).ToModel()

// stepRegister returns every state the register may be in after a, none if a is illegal.
func stepRegister(r register, a access) []any {
	fresh := a.Token >= r.highest // a token equal to the highest is the same holder's
	switch a.Outcome {
	case OK:
		if !fresh {
			return nil // accepted a stale token
		}
		if a.Kind == Read {
			if a.Value != r.value {
				return nil // returned a value the register does not hold
			}
			return []any{register{highest: a.Token, value: r.value}}
		}
		return []any{register{highest: a.Token, value: a.Value}}
	case Refused:
		if fresh {
			return nil // refused a token it should have accepted
		}
		return []any{r}
	default: // Unknown: it had no effect, or it took effect as an accepted access would have.
		if !fresh {
			return []any{r}
		}
		next := register{highest: a.Token, value: r.value}
		if a.Kind == Write {
			next.value = a.Value
		}
		// A read whose result is unknown returned no value to compare, so only its token
		// can have had an effect.
		return []any{r, next}
	}
}

func describeAccess(a access) string {
	switch {
	case a.Kind == Read && a.Outcome == OK:
		return fmt.Sprintf("read t%d → %d ok", a.Token, a.Value)
	case a.Kind == Read:
		return fmt.Sprintf("read t%d %s", a.Token, a.Outcome)
	default:
		return fmt.Sprintf("write t%d = %d %s", a.Token, a.Value, a.Outcome)
	}
}

// registerOps are the history's reads and writes, whatever their outcome.
func registerOps(h *History) []porcupine.Operation {
	fenced := fencedAfter(h)
	var ops []porcupine.Operation
	for _, op := range h.Operations {
		if op.Kind != Read && op.Kind != Write {
			continue
		}
		ret := op.returned()
		if op.Outcome == Unknown {
			ret = max(op.Call, fenced(op.Token))
		}
		ops = append(ops, porcupine.Operation{
			ClientId: op.Client,
			Input:    access{Kind: op.Kind, Token: op.Token, Value: op.Value, Outcome: op.Outcome},
			Call:     op.Call,
			Return:   ret,
		})
	}
	return ops
}

// fencedAfter returns, for a token, the earliest instant by which the register has
// certainly seen a higher one: the earliest return of an accepted access with a higher
// token (never if there is none).
//
// It bounds the return time of an access whose outcome is unknown. Such an access might
// take effect at any instant after its call, but once a higher token has been seen it can
// only be refused, which is the same as having had no effect; and having no effect is
// always a legal step for it, so it may as well be linearized by then. Without this bound
// every unknown access would stay open to the end of the history, and the search for a
// linearization of an illegal history grows exponentially in their number.
func fencedAfter(h *History) func(token uint64) int64 {
	type seen struct {
		token uint64
		at    int64
	}
	var accepted []seen
	for _, op := range h.Operations {
		if (op.Kind == Read || op.Kind == Write) && op.Outcome == OK {
			accepted = append(accepted, seen{op.Token, op.returned()})
		}
	}
	slices.SortFunc(accepted, func(a, b seen) int { return cmp.Compare(a.token, b.token) })
	// earliest[i] is the earliest return among accepted[i:].
	earliest := make([]int64, len(accepted)+1)
	earliest[len(accepted)] = never
	for i := len(accepted) - 1; i >= 0; i-- {
		earliest[i] = min(accepted[i].at, earliest[i+1])
	}
	return func(token uint64) int64 {
		i := sort.Search(len(accepted), func(i int) bool { return accepted[i].token > token })
		return earliest[i]
	}
}
