package main

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// noReturn marks an operation that never returned.
const noReturn = -1

// op builds an operation; ret is noReturn for one that never returned.
func op(client int, kind Kind, outcome Outcome, call, ret int64, token, value uint64) Op {
	o := Op{Client: client, Kind: kind, Call: call, Outcome: outcome, Token: token, Value: value}
	if ret != noReturn {
		o.Return = &ret
	}
	return o
}

// history builds a mutex history (limit 1, no data loss) unless changed by the caller.
func history(ops ...Op) *History {
	return &History{Run: "test", LockLimit: 1, Operations: ops}
}

// modelCase is a small hand-built history and whether a model must find it linearizable.
type modelCase struct {
	name         string
	h            *History
	linearizable bool
}

// runModelCases checks each case's operations (picked from its history by ops) with model.
func runModelCases(t *testing.T, model func(*History) porcupine.Model, ops func(*History) []porcupine.Operation, cases []modelCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.h.validate(); err != nil {
				t.Fatalf("the test's history is invalid: %v", err)
			}
			got := porcupine.CheckOperations(model(c.h), ops(c.h))
			if got != c.linearizable {
				t.Errorf("linearizable = %v, want %v", got, c.linearizable)
			}
		})
	}
}
