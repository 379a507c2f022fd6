package leasehold

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLeadershipHandsOverAndObserversSeeEveryLeader(t *testing.T) {
	conn, _ := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	changes, failure, err := Observe(ctx, conn, "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	if first := <-changes; first != nil {
		t.Fatalf("a new election has no leader, got %+v", first)
	}
	a, err := Campaign(ctx, conn, "scheduler", []byte("host-a"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	termA, err := a.Elected()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Campaign(ctx, conn, "scheduler", []byte("host-b"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := CurrentLeader(ctx, conn, "scheduler")
	if err != nil || leader == nil || string(leader.Value) != "host-a" || leader.Term != termA {
		t.Fatalf("leader while a leads: %+v %v", leader, err)
	}
	if err := a.Proclaim([]byte("host-a:8080")); err != nil {
		t.Fatal(err)
	}
	wasLeader, err := a.Resign()
	if err != nil || !wasLeader {
		t.Fatalf("resign: %v %v", wasLeader, err)
	}
	termB, err := b.Elected()
	if err != nil {
		t.Fatal(err)
	}
	if termB <= termA {
		t.Fatalf("terms must grow: %d then %d", termA, termB)
	}
	// The observer saw every leader in order: a, a's new value, (no leader,) b.
	var seen []string
	for len(seen) == 0 || seen[len(seen)-1] != "host-b" {
		select {
		case change, open := <-changes:
			if !open {
				t.Fatalf("observation ended: %v", failure())
			}
			if change != nil {
				seen = append(seen, string(change.Value))
			}
		case <-ctx.Done():
			t.Fatalf("observer saw only %v", seen)
		}
	}
	want := []string{"host-a", "host-a:8080", "host-b"}
	if len(seen) != len(want) {
		t.Fatalf("observer saw %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("observer saw %v, want %v", seen, want)
		}
	}
}

// A leader whose server restarts resumes its leadership on the other one with the same term:
// an observer elsewhere sees no change, and the leader can still proclaim and resign.
func TestALeaderKeepsItsTermAcrossARestartOfItsServer(t *testing.T) {
	r := startReplicas(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	changes, failure, err := Observe(ctx, r.conns[1], "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	next := func() *Leader {
		t.Helper()
		select {
		case change, open := <-changes:
			if !open {
				t.Fatalf("observation ended: %v", failure())
			}
			return change
		case <-ctx.Done():
			t.Fatal("the observer saw nothing")
			return nil
		}
	}
	if first := next(); first != nil {
		t.Fatalf("a new election has no leader, got %+v", first)
	}
	// Its connection is on the first replica, while the observer is on the second.
	candidate, err := Campaign(ctx, dial(t, r.list()), "scheduler", []byte("host-a"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	term, err := candidate.Elected()
	if err != nil {
		t.Fatal(err)
	}
	if seen := next(); seen == nil || seen.Term != term || string(seen.Value) != "host-a" {
		t.Fatalf("the observer saw %+v", seen)
	}
	r.stop(0, syscall.SIGTERM)
	r.restart(0)
	// Answered only on a resumed stream: the first replica's is gone.
	if err := candidate.Proclaim([]byte("host-a:8080")); err != nil {
		t.Fatal(err)
	}
	if seen := next(); seen == nil || seen.Term != term || string(seen.Value) != "host-a:8080" {
		t.Fatalf("after the restart the observer saw %+v, want term %d and the new value", seen, term)
	}
	leader, err := CurrentLeader(ctx, r.conns[0], "scheduler")
	if err != nil || leader == nil || leader.Term != term || string(leader.Value) != "host-a:8080" {
		t.Fatalf("leader through the restarted replica: %+v %v", leader, err)
	}
	select {
	case <-candidate.Done():
		t.Fatalf("the candidacy ended: %s", candidate.Lost())
	default:
	}
	if wasLeader, err := candidate.Resign(); err != nil || !wasLeader {
		t.Fatalf("resign: %v %v", wasLeader, err)
	}
	if seen := next(); seen != nil {
		t.Fatalf("after the resignation the observer saw %+v", seen)
	}
}

// A leader whose server freezes is lost by its own clock: no extended came in time. It stops
// believing when the validity last confirmed to it ends, not later (another may lead from then
// on) and not much earlier.
func TestALeaderIsLostByItsClockWhenItsServerFreezes(t *testing.T) {
	conn, _, server := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	candidate, err := Campaign(ctx, conn, "scheduler", []byte("host-a"), 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := candidate.Elected(); err != nil {
		t.Fatal(err)
	}
	if err := server.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer server.Signal(syscall.SIGCONT)
	frozenAt := time.Now()
	select {
	case <-candidate.Done():
		lostAt := time.Now()
		if reason := candidate.Lost(); !strings.Contains(reason, "server silent") {
			t.Fatalf("reason: %s", reason)
		}
		// Read after the end: a renewal already on its way when the server froze counts too.
		validUntil := candidate.ValidUntil()
		if validUntil.After(frozenAt.Add(500 * time.Millisecond)) {
			t.Fatalf("vouched %v past the freeze", validUntil.Sub(frozenAt))
		}
		if lostAt.Before(validUntil) {
			t.Fatalf("stopped believing %v early", validUntil.Sub(lostAt))
		}
		if late := lostAt.Sub(validUntil); late > 100*time.Millisecond {
			t.Fatalf("believed %v past its validity", late)
		}
	case <-ctx.Done():
		t.Fatal("the leadership was never lost while the server was frozen")
	}
}

// With NoResume a leader whose server stops has lost its leadership, as before.
func TestALeaderWithoutResumeIsLostWhenItsServerStops(t *testing.T) {
	r := startReplicas(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	candidate, err := Campaign(ctx, dial(t, r.list()), "scheduler", []byte("host-a"), 2*time.Second,
		CampaignOptions{NoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := candidate.Elected(); err != nil {
		t.Fatal(err)
	}
	r.stop(0, syscall.SIGTERM)
	select {
	case <-candidate.Done():
		if reason := candidate.Lost(); !strings.Contains(reason, "shutting down") {
			t.Fatalf("reason: %s", reason)
		}
	case <-ctx.Done():
		t.Fatal("the leadership was kept")
	}
	if leader, err := CurrentLeader(ctx, r.conns[1], "scheduler"); err != nil || leader != nil {
		t.Fatalf("leader after its server stopped: %+v %v", leader, err)
	}
}

// Cancelling a leader's context resigns: the next candidate is elected at once, not after the
// leader's grace (its TTL, 5 s, by default), which a stream merely cancelled would keep it for.
func TestCancellingALeadersContextResigns(t *testing.T) {
	conn, port := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leaderCtx, stepDown := context.WithCancel(ctx)
	a, err := Campaign(leaderCtx, conn, "scheduler", []byte("host-a"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	termA, err := a.Elected()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Campaign(ctx, conn, "scheduler", []byte("host-b"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Resign()
	elected, failed := inBackground(b.Elected)
	waitForLine(t, port, "leasehold:election:{scheduler}:line", "1")
	stepDown()
	termB := awaitHeld(t, elected, failed, time.Second, "not elected within a second of the leader's cancel")
	if termB <= termA {
		t.Fatalf("terms must grow: %d then %d", termA, termB)
	}
	if wasLeader, err := a.Resign(); err != nil || !wasLeader {
		t.Fatalf("the cancelled leader's outcome: %v %v", wasLeader, err)
	}
	// A candidate still in line leaves it when cancelled; Elected says it was cancelled.
	waiterCtx, leave := context.WithCancel(ctx)
	c, err := Campaign(waiterCtx, conn, "scheduler", []byte("host-c"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitForLine(t, port, "leasehold:election:{scheduler}:line", "1")
	leave()
	if _, err := c.Elected(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Elected after the cancel: %v", err)
	}
	waitForLine(t, port, "leasehold:election:{scheduler}:line", "0")
}
