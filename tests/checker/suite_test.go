package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// statuses runs every check and returns each one's status by its name.
func statuses(t *testing.T, h *History) (map[string]status, string) {
	t.Helper()
	dir := t.TempDir()
	got := map[string]status{}
	for _, r := range checkAll(h, 5*time.Second, dir) {
		name, _, _ := strings.Cut(strings.TrimPrefix(r.line, h.Run+" "), ":")
		got[name] = r.status
	}
	return got, dir
}

// dataLossHistory has two clients holding a mutex at once, as when Redis restarted empty,
// and fencing that held; stale adds a write accepted for the superseded token.
func dataLossHistory(stale bool) *History {
	outcome := Refused
	if stale {
		outcome = OK
	}
	h := history(
		op(0, Acquire, OK, 0, 10, 1, 0),
		op(0, Write, OK, 20, 30, 1, 1),
		op(1, Acquire, OK, 40, 50, 2, 0), // Redis forgot w0's hold
		op(1, Write, OK, 60, 70, 2, 2),
		op(0, Write, outcome, 80, 90, 1, 3),
		op(0, Release, OK, 100, 110, 1, 0),
		op(1, Release, OK, 120, 130, 2, 0),
	)
	h.DataLoss, h.RenewalMs = true, 167
	return h
}

func TestDataLossPermitsOverlapNotStaleWrites(t *testing.T) {
	got, dir := statuses(t, dataLossHistory(false))
	want := map[string]status{"register": passed, "tokens": passed, "mutex": permitted,
		"election": passed, "overlap": permitted, "leader overlap": passed}
	for name, st := range want {
		if got[name] != st {
			t.Errorf("%s: status %v, want %v", name, got[name], st)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "mutex.html")); err != nil {
		t.Errorf("a permitted failure still leaves its visualisation: %v", err)
	}

	got, _ = statuses(t, dataLossHistory(true))
	if got["register"] != failed {
		t.Errorf("a stale write accepted must fail even with data loss: %v", got["register"])
	}
	if got["mutex"] != permitted {
		t.Errorf("mutex: %v, want permitted", got["mutex"])
	}
}

// A data-loss history whose overlap outlasts the bound fails the run: the mutex model is
// still only reported (permitted), but the interval check is not.
func TestDataLossOverlapBeyondTheBoundFails(t *testing.T) {
	h := dataLossHistory(false)
	h.RenewalMs = 1 // a bound of 151 ms
	h.Operations[5] = op(0, Release, OK, 200_000_000, 200_000_010, 1, 0)
	h.Operations[6] = op(1, Release, OK, 300_000_000, 300_000_010, 2, 0)
	got, _ := statuses(t, h)
	if got["mutex"] != permitted || got["overlap"] != failed || got["register"] != passed {
		t.Errorf("mutex %v, overlap %v, register %v: want permitted, failed, passed", got["mutex"], got["overlap"], got["register"])
	}
}

func TestWithoutDataLossOverlapFails(t *testing.T) {
	h := dataLossHistory(false)
	h.DataLoss = false
	got, _ := statuses(t, h)
	if got["mutex"] != failed || got["overlap"] != failed {
		t.Errorf("mutex %v, overlap %v: both must fail", got["mutex"], got["overlap"])
	}
}

func TestDataLossStillChecksTerms(t *testing.T) {
	h := history(
		op(0, Campaign, OK, 0, 10, 2, 0),
		op(1, Campaign, OK, 20, 30, 1, 0), // two leaders, and the term went back
		op(0, Resign, OK, 40, 50, 2, 0),
		op(1, Resign, OK, 60, 70, 1, 0),
	)
	h.DataLoss, h.RenewalMs = true, 167
	got, _ := statuses(t, h)
	if got["terms"] != failed {
		t.Errorf("terms: %v, want failed", got["terms"])
	}
	if got["election"] != permitted || got["leader overlap"] != permitted {
		t.Errorf("election %v, leader overlap %v: both permitted", got["election"], got["leader overlap"])
	}
}

func TestModelsWithoutOpsAreSkipped(t *testing.T) {
	h := history(op(0, Write, OK, 0, 10, 1, 1))
	for _, r := range checkAll(h, time.Second, t.TempDir()) {
		if r.status != passed {
			t.Errorf("%q: %v", r.line, r.status)
		}
		if strings.Contains(r.line, "terms") {
			t.Errorf("terms checked with no campaigns: %q", r.line)
		}
		if !strings.Contains(r.line, "register") && !strings.HasSuffix(r.line, "no ops") {
			t.Errorf("%q: want no ops", r.line)
		}
	}
}
