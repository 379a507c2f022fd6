package main

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestRWLock(t *testing.T) {
	cases := []modelCase{
		{"readers together, then a writer", history(
			op(0, Acquire, OK, 0, 10, 1, Shared),
			op(1, Acquire, OK, 5, 15, 2, Shared),
			op(2, Acquire, OK, 12, 40, 3, 0), // waits for both readers
			op(0, Release, OK, 20, 25, 1, 0),
			op(1, Lost, OK, 30, 30, 2, 0),
			op(2, Release, OK, 50, 55, 3, 0),
			op(0, Acquire, OK, 60, 70, 4, Shared),
		), true},
		{"a reader beside a writer", history(
			op(0, Acquire, OK, 0, 10, 1, 0),
			op(1, Acquire, OK, 20, 30, 2, Shared),
			op(0, Release, OK, 40, 50, 1, 0),
		), false},
		{"two writers at once", history(
			op(1, Acquire, OK, 0, 5, 9, Shared), // makes it a read-write history
			op(1, Release, OK, 6, 7, 9, 0),
			op(0, Acquire, OK, 10, 20, 1, 0),
			op(2, Acquire, OK, 30, 40, 2, 0),
			op(0, Release, OK, 50, 60, 1, 0),
		), false},
		{"a hold ended that was not held", history(
			op(0, Acquire, OK, 0, 10, 1, Shared),
			op(1, Release, OK, 20, 30, 1, 0),
		), false},
	}
	runModelCases(t, func(*History) porcupine.Model { return rwlockModel }, rwlockOps, cases)
}

func TestRWLockOverlap(t *testing.T) {
	readers := history(
		op(0, Acquire, OK, 0, 10, 1, Shared),
		op(1, Acquire, OK, 5, 15, 2, Shared),
		op(0, Release, OK, 30, 30, 1, 0),
		op(1, Release, OK, 40, 40, 2, 0),
	)
	if r := lockOverlap(readers); r.status != passed {
		t.Errorf("readers together: %s", r.line)
	}
	writer := history(
		op(0, Acquire, OK, 0, 10, 1, Shared),
		op(1, Acquire, OK, 5, 15, 2, 0),
		op(0, Release, OK, 30, 30, 1, 0),
		op(1, Release, OK, 40, 40, 2, 0),
	)
	if r := lockOverlap(writer); r.status != failed || !strings.Contains(r.line, "1 overlap of") {
		t.Errorf("a writer beside a reader: %s", r.line)
	}
	writer.DataLoss = true
	if r := lockOverlap(writer); r.status != permitted {
		t.Errorf("with data loss: %s", r.line)
	}
}

func TestRWTokens(t *testing.T) {
	cases := []modelCase{
		{"two readers granted at once share a token", history(
			op(0, Acquire, OK, 0, 10, 5, Shared),
			op(1, Acquire, OK, 0, 10, 5, Shared),
			op(2, Acquire, OK, 20, 30, 6, 0),
		), true},
		{"a reader's token not above an earlier writer's", history(
			op(2, Acquire, OK, 0, 10, 6, 0),
			op(0, Acquire, OK, 20, 30, 6, Shared),
		), false},
		{"a writer's token not above an earlier reader's", history(
			op(0, Acquire, OK, 0, 10, 6, Shared),
			op(2, Acquire, OK, 20, 30, 6, 0),
		), false},
		{"a reader's token below an earlier reader's", history(
			op(0, Acquire, OK, 0, 10, 6, Shared),
			op(1, Acquire, OK, 20, 30, 5, Shared),
		), false},
	}
	runModelCases(t, func(*History) porcupine.Model { return rwTokensModel },
		func(h *History) []porcupine.Operation { return tokensCheck(h).ops }, cases)
}
