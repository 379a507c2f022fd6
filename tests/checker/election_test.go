package main

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestElection(t *testing.T) {
	cases := []modelCase{
		{"leadership handed over", history(
			op(0, Campaign, OK, 0, 10, 1, 0),
			op(1, Campaign, OK, 15, 40, 2, 0),
			op(0, Resign, OK, 20, 25, 1, 0),
			op(2, Campaign, Refused, 30, 50, 0, 0),
		), true},
		{"two leaders at once", history(
			op(0, Campaign, OK, 0, 10, 1, 0),
			op(1, Campaign, OK, 20, 30, 2, 0),
			op(0, Resign, OK, 40, 50, 1, 0),
		), false},
		{"a new leader's term is not above the last", history(
			op(0, Campaign, OK, 0, 10, 2, 0),
			op(0, Resign, OK, 20, 30, 2, 0),
			op(1, Campaign, OK, 40, 50, 1, 0),
		), false},
		{"a leadership ended that was not held", history(
			op(0, Campaign, OK, 0, 10, 1, 0),
			op(0, Resign, OK, 20, 30, 2, 0),
		), false},
	}
	runModelCases(t, func(*History) porcupine.Model { return electionModel },
		func(h *History) []porcupine.Operation { return changeOps(h, Campaign, Resign) }, cases)
}
