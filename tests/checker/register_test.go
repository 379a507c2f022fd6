package main

import (
	"slices"
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestRegister(t *testing.T) {
	cases := []modelCase{
		{"empty register reads 0", history(
			op(0, Read, OK, 0, 10, 1, 0),
		), true},
		{"fenced writes and reads in token order", history(
			op(0, Write, OK, 0, 10, 1, 5),
			op(0, Read, OK, 20, 30, 1, 5),
			op(0, Write, OK, 40, 50, 1, 6), // the same token again: the same holder
			op(1, Write, OK, 60, 70, 2, 7),
			op(1, Read, OK, 80, 90, 2, 7),
		), true},
		{"stale write refused after a newer token was seen", history(
			op(1, Write, OK, 0, 10, 2, 7),
			op(0, Write, Refused, 20, 30, 1, 5),
			op(1, Read, OK, 40, 50, 2, 7),
		), true},
		{"a read raises the highest token too", history(
			op(1, Read, OK, 0, 10, 2, 0),
			op(0, Write, Refused, 20, 30, 1, 5),
		), true},
		{"concurrent writes may linearize either way", history(
			op(0, Write, OK, 0, 100, 1, 1),
			op(1, Write, OK, 10, 90, 1, 2),
			op(2, Read, OK, 110, 120, 1, 1),
		), true},
		{"stale write accepted after a newer token was seen", history(
			op(1, Write, OK, 0, 10, 2, 7),
			op(0, Write, OK, 20, 30, 1, 5),
		), false},
		{"stale read accepted after a newer token was seen", history(
			op(1, Write, OK, 0, 10, 2, 7),
			op(0, Read, OK, 20, 30, 1, 7),
		), false},
		{"read returns a value never written", history(
			op(0, Write, OK, 0, 10, 1, 5),
			op(0, Read, OK, 20, 30, 1, 6),
		), false},
		{"read returns an overwritten value", history(
			op(0, Write, OK, 0, 10, 1, 5),
			op(1, Write, OK, 20, 30, 2, 6),
			op(1, Read, OK, 40, 50, 2, 5),
		), false},
		{"fresh token refused", history(
			op(0, Write, OK, 0, 10, 1, 5),
			op(1, Write, Refused, 20, 30, 2, 6),
		), false},
		{"unknown write may have taken effect", history(
			op(0, Write, Unknown, 0, noReturn, 1, 5),
			op(1, Read, OK, 20, 30, 1, 5),
		), true},
		{"unknown write may not have taken effect", history(
			op(0, Write, Unknown, 0, noReturn, 1, 5),
			op(1, Read, OK, 20, 30, 1, 0),
		), true},
		{"unknown write may take effect after its call errored", history(
			op(0, Write, Unknown, 0, 10, 1, 5),
			op(1, Read, OK, 20, 30, 1, 0),
			op(1, Read, OK, 40, 50, 1, 5),
		), true},
		{"unknown write takes effect at most once", history(
			op(0, Write, Unknown, 0, noReturn, 1, 5),
			op(1, Write, OK, 10, 20, 1, 6),
			op(1, Read, OK, 30, 40, 1, 5),
			op(1, Read, OK, 50, 60, 1, 6),
		), false},
		{"unknown write's newer token may fence out an older one", history(
			op(0, Write, Unknown, 0, noReturn, 2, 5),
			op(1, Write, Refused, 10, 20, 1, 6),
		), true},
		{"unknown write with a stale token cannot have taken effect", history(
			op(1, Write, OK, 0, 10, 2, 7),
			op(0, Write, Unknown, 20, noReturn, 1, 5),
			op(1, Read, OK, 30, 40, 2, 5),
		), false},
		{"unknown write seen by the next holder", history(
			op(0, Write, Unknown, 0, noReturn, 1, 5),
			op(1, Read, OK, 10, 20, 2, 5),
		), true},
		{"unknown write cannot take effect once a newer token was seen", history(
			op(0, Write, Unknown, 0, noReturn, 1, 5),
			op(1, Write, OK, 10, 20, 2, 6),
			op(1, Read, OK, 30, 40, 2, 5),
		), false},
		{"unknown read may have raised the highest token", history(
			op(0, Read, Unknown, 0, noReturn, 2, 0),
			op(1, Write, Refused, 10, 20, 1, 6),
		), true},
	}
	runModelCases(t, func(*History) porcupine.Model { return registerModel }, registerOps, cases)
}

func TestUnknownAccessesEndWhenFenced(t *testing.T) {
	h := history(
		op(0, Write, Unknown, 0, noReturn, 1, 5), // fenced once t3 was seen, by 25
		op(1, Write, OK, 10, 30, 2, 6),
		op(2, Read, OK, 15, 25, 3, 6), // t3 was seen by 25
		op(1, Write, Unknown, 20, noReturn, 2, 7),
		op(2, Read, Unknown, 40, noReturn, 2, 0),  // called after t3 was seen
		op(2, Write, Unknown, 50, noReturn, 3, 8), // never fenced
	)
	var got []int64
	for _, o := range registerOps(h) {
		got = append(got, o.Return)
	}
	want := []int64{25, 30, 25, 25, 40, never}
	if !slices.Equal(got, want) {
		t.Errorf("returns %v, want %v", got, want)
	}
}
