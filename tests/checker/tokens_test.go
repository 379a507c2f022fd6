package main

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestTokens(t *testing.T) {
	cases := []modelCase{
		{"tokens grow in real time", history(
			op(0, Acquire, OK, 0, 10, 1, 0),
			op(1, Acquire, OK, 20, 30, 2, 0),
			op(0, Acquire, OK, 40, 50, 5, 0),
		), true},
		{"concurrent acquisitions may have tokens in either order", history(
			op(0, Acquire, OK, 0, 100, 2, 0),
			op(1, Acquire, OK, 10, 90, 1, 0),
		), true},
		{"refused and unknown acquisitions are not checked", history(
			op(0, Acquire, OK, 0, 10, 3, 0),
			op(1, Acquire, Refused, 20, 30, 0, 0),
			op(2, Acquire, Unknown, 20, noReturn, 0, 0),
			op(1, Acquire, OK, 40, 50, 4, 0),
		), true},
		{"token smaller than an earlier completed acquisition's", history(
			op(0, Acquire, OK, 0, 10, 5, 0),
			op(1, Acquire, OK, 20, 30, 4, 0),
		), false},
		{"the same token granted twice", history(
			op(0, Acquire, OK, 0, 10, 5, 0),
			op(1, Acquire, OK, 5, 30, 5, 0),
		), false},
	}
	runModelCases(t, func(*History) porcupine.Model { return tokensModel },
		func(h *History) []porcupine.Operation { return grantOps(h, Acquire) }, cases)
}

func TestTerms(t *testing.T) {
	cases := []modelCase{
		{"terms grow in real time", history(
			op(0, Campaign, OK, 0, 10, 1, 0),
			op(1, Campaign, OK, 20, 30, 2, 0),
		), true},
		{"term smaller than an earlier completed election's", history(
			op(0, Campaign, OK, 0, 10, 2, 0),
			op(1, Campaign, OK, 20, 30, 1, 0),
		), false},
	}
	runModelCases(t, func(*History) porcupine.Model { return termsModel },
		func(h *History) []porcupine.Operation { return grantOps(h, Campaign) }, cases)
}
