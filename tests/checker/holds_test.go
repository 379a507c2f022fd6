package main

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

func withLimit(limit int, h *History) *History {
	h.LockLimit = limit
	return h
}

func TestHolds(t *testing.T) {
	cases := []modelCase{
		{"mutex handed over", history(
			op(0, Acquire, OK, 0, 10, 1, 0),
			op(1, Acquire, OK, 15, 30, 2, 0), // waits: granted once the release took effect
			op(0, Release, OK, 20, 25, 1, 0),
			op(1, Lost, OK, 40, 40, 2, 0),
			op(0, Acquire, OK, 50, 60, 3, 0),
		), true},
		{"refused and unknown acquisitions hold nothing", history(
			op(0, Acquire, OK, 0, 10, 1, 0),
			op(1, Acquire, Refused, 5, 50, 0, 0),
			op(2, Acquire, Unknown, 5, noReturn, 0, 0),
			op(0, Release, OK, 60, 70, 1, 0),
		), true},
		{"two holders of a mutex at once", history(
			op(0, Acquire, OK, 0, 10, 1, 0),
			op(1, Acquire, OK, 20, 30, 2, 0),
			op(0, Release, OK, 40, 50, 1, 0),
		), false},
		{"a hold ended that was not held", history(
			op(0, Release, OK, 0, 10, 1, 0),
		), false},
		{"a hold ended by another client", history(
			op(0, Acquire, OK, 0, 10, 1, 0),
			op(1, Release, OK, 20, 30, 1, 0),
		), false},
		{"two holders of a 2-permit semaphore", withLimit(2, history(
			op(0, Acquire, OK, 0, 10, 1, 0),
			op(1, Acquire, OK, 20, 30, 2, 0),
			op(0, Release, OK, 40, 50, 1, 0),
			op(2, Acquire, OK, 45, 60, 3, 0),
		)), true},
		{"three holders of a 2-permit semaphore", withLimit(2, history(
			op(0, Acquire, OK, 0, 10, 1, 0),
			op(1, Acquire, OK, 20, 30, 2, 0),
			op(2, Acquire, OK, 40, 50, 3, 0),
			op(0, Release, OK, 60, 70, 1, 0),
		)), false},
	}
	runModelCases(t, func(h *History) porcupine.Model { return holdsModel(h.LockLimit) },
		func(h *History) []porcupine.Operation { return changeOps(h, Acquire, Release, Lost) }, cases)
}
