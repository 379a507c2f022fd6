package leasehold

// The operator's calls (RevokeLeader, Revoke by fencing token, Watch across a restart) against
// the real binary; operator_test.go has them against fake servers.

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A leader revoked (by its term, through another server) hears it at once with LostRevoked, is
// not resumed, and the next candidate is elected with a larger term; a second revoke of that
// term finds nobody.
func TestARevokedLeaderHearsItAndTheNextIsElected(t *testing.T) {
	r := startReplicas(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := Campaign(ctx, r.conns[0], "vote", []byte("a"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	termA, err := a.Elected()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Campaign(ctx, r.conns[0], "vote", []byte("b"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitForLine(t, r.redisPort, "leasehold:election:{vote}:line", "1")
	revoked, err := RevokeLeader(ctx, r.conns[1], "vote", termA)
	if err != nil || revoked == nil || revoked.Term != termA || string(revoked.Value) != "a" {
		t.Fatalf("revoked %+v, %v", revoked, err)
	}
	within(t, a.Done(), "the leader never heard")
	if err := a.Err(); !errors.Is(err, LostRevoked) {
		t.Fatalf("a's candidacy ended with %v", err)
	}
	if termB, err := b.Elected(); err != nil || termB <= termA {
		t.Fatalf("b elected with term %d after %d: %v", termB, termA, err)
	}
	if again, err := RevokeLeader(ctx, r.conns[1], "vote", termA); again != nil || err != nil {
		t.Fatalf("revoked term %d again: %+v, %v", termA, again, err)
	}
}

// A session's lease revoked by its fencing token is lost alone with LostRevoked: the session
// and its other lease go on.
func TestASessionLeaseRevokedIsLostAlone(t *testing.T) {
	conn, _ := start(t)
	session := newSession(t, conn, SessionOptions{TTL: 5 * time.Second})
	job, other := holdLock(t, session, "job"), holdLock(t, session, "other")
	revoked, err := Revoke(context.Background(), conn, "job", job.FencingToken)
	if err != nil || len(revoked) != 1 || revoked[0].FencingToken != job.FencingToken {
		t.Fatalf("revoked %+v, %v", revoked, err)
	}
	lostAlone(t, job, other, "", 2*time.Second)
	if err := job.Err(); !errors.Is(err, LostRevoked) || session.Err() != nil {
		t.Fatalf("the lease's Err %v, the session's %v", err, session.Err())
	}
	if held, err := other.Release(); !held || err != nil {
		t.Fatalf("the other lease's release: %v %v", held, err)
	}
}

// A watch whose server stops goes on when it is back, without the state it had shown again.
func TestAWatchGoesOnWhenItsServerComesBack(t *testing.T) {
	r := startReplicas(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	states := watchInBackground(ctx, dial(t, r.addrs[0]), "job")
	states.next(t)
	lease, err := Acquire(ctx, r.conns[1], "job", Options{Holder: "holder-a"})
	if err != nil {
		t.Fatal(err)
	}
	if state := states.next(t); state.Holder != "holder-a" {
		t.Fatalf("held: %+v", state)
	}
	r.stop(0, syscall.SIGTERM)
	r.restart(0)
	// The watch is back once its server listens for the name's changes again (sharded pub/sub).
	deadline := time.Now().Add(5 * time.Second)
	for !strings.HasSuffix(redisCli(r.redisPort, "PUBSUB", "SHARDNUMSUB", "leasehold:{job}:watched"), "\n1") {
		if time.Now().After(deadline) {
			t.Fatal("the watch never came back")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := lease.Release(); err != nil {
		t.Fatal(err)
	}
	if state := states.next(t); state.Held { // not held by holder-a twice: that is skipped
		t.Fatalf("after the release: %+v", state)
	}
}
