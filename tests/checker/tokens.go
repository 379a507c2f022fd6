package main

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// grant is a fencing token (or a leadership term) a client was given.
type grant struct {
	Client int
	Token  uint64
}

// growthModel checks that the tokens (or terms) granted grow in real time: each grant's
// token is above every token granted before it, so a grant that returned before another
// was called has the smaller token. That is what lets the fenced resource turn away a
// holder that was superseded. The state is the highest token granted so far.
func growthModel(verb, noun string) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return uint64(0) },
		Step: func(state, input, _ any) (bool, any) {
			highest, g := state.(uint64), input.(grant)
			if g.Token <= highest {
				return false, state
			}
			return true, g.Token
		},
		DescribeOperation: func(input, _ any) string {
			g := input.(grant)
			return fmt.Sprintf("w%d %s → %s%d", g.Client, verb, noun, g.Token)
		},
		DescribeState: func(state any) string {
			return fmt.Sprintf("highest %s%d", noun, state.(uint64))
		},
	}
}

// tokensModel checks the fencing tokens of acquisitions.
var tokensModel = growthModel("acquire", "t")

// termsModel checks the terms of elections.
var termsModel = growthModel("elected", "term ")

// grantOps are the successful operations of the given kind (acquire or campaign). Refused
// and unknown ones are left out: they granted the client nothing it knows of.
func grantOps(h *History, kind Kind) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, op := range h.Operations {
		if op.Kind != kind || op.Outcome != OK {
			continue
		}
		ops = append(ops, porcupine.Operation{
			ClientId: op.Client,
			Input:    grant{Client: op.Client, Token: op.Token},
			Call:     op.Call,
			Return:   op.returned(),
		})
	}
	return ops
}
