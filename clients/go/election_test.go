package leasehold

import (
	"context"
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
