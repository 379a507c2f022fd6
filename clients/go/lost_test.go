package leasehold

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// A LostError is its Reason to errors.Is and errors.As, wraps its causes, and stays what it is
// through refusal (which makes a *Refusal of any other error carrying a status).
func TestALostErrorIsItsReasonAndItsCauses(t *testing.T) {
	cause := status.Error(codes.NotFound, "no lease holds this token")
	err := error(lostBy("session", LostRevoked, "revoked by an operator", ErrSessionLost, nil, cause))
	if !errors.Is(err, LostRevoked) || errors.Is(err, LostTaken) || !errors.Is(err, ErrSessionLost) {
		t.Fatalf("errors.Is: %v", err)
	}
	var reason LostReason
	var lost *LostError
	if !errors.As(err, &reason) || reason != LostRevoked || !errors.As(err, &lost) || lost.Message != "revoked by an operator" {
		t.Fatalf("errors.As: %v %v", reason, lost)
	}
	if status.Code(err) != codes.NotFound || refusal(err) != err {
		t.Fatalf("its cause's status %v, through refusal %v", status.Code(err), refusal(err))
	}
	if got := err.Error(); got != "leasehold: session lost: revoked by an operator" {
		t.Fatalf("Error: %s", got)
	}
	if LostShutdown.String() != "shutdown" || LostReason(9).String() != "LostReason(9)" {
		t.Fatalf("names: %s %s", LostShutdown, LostReason(9))
	}
	if int32(LostRevoked) != int32(pb.LostReason_LOST_REASON_REVOKED) || int32(LostTaken) != int32(pb.LostReason_LOST_REASON_TAKEN) {
		t.Fatal("the values are not the wire's")
	}
}

// A Lease whose server says `lost` with code REVOKED (or MAX_HOLD) is lost at once with that
// reason, and is not resumed (no second stream), whatever its resume grace.
func TestALeaseRevokedIsLostWithItsReasonAndNotResumed(t *testing.T) {
	for code, reason := range map[pb.LostReason]LostReason{
		pb.LostReason_LOST_REASON_REVOKED: LostRevoked, pb.LostReason_LOST_REASON_MAX_HOLD: LostMaxHold,
	} {
		t.Run(reason.String(), func(t *testing.T) {
			conn, locks, _ := serveFakes(t)
			lease, stream := heldOnFake(t, conn, locks, Options{TTL: 10 * time.Second, MaxHold: time.Minute})
			if lease.Err() != nil {
				t.Fatalf("Err before the loss: %v", lease.Err())
			}
			send(t, stream, &pb.LeaseResponse{Event: &pb.LeaseResponse_Lost{Lost: &pb.Lost{Reason: "told so", Code: code}}})
			locks.ends <- nil
			within(t, lease.Lost(), "Lost() never closed")
			var lost *LostError
			if err := lease.Err(); !errors.Is(err, reason) || !errors.As(err, &lost) || lost.Message != "told so" {
				t.Fatalf("Err: %v", err)
			}
			// (Its release may report the ended stream's error, sent on it or not: it is lost anyway.)
			if held, _ := lease.Release(); held {
				t.Fatal("released a lease that was lost")
			}
			notResumed(t, locks)
		})
	}
}

// A leader whose server says `lost` with code REVOKED ends its candidacy with that reason: Err,
// Elected and Proclaim all say so.
func TestALeaderRevokedEndsItsCandidacyWithItsReason(t *testing.T) {
	conn, _, elections := serveFakes(t)
	candidate, err := Campaign(context.Background(), conn, "vote", []byte("a"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stream := within(t, elections.campaigns, "no Campaign stream")
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	send(t, stream, &pb.CampaignResponse{Event: &pb.CampaignResponse_Elected{Elected: &pb.Elected{
		Term: 7, ValidForMs: 10_000, Token: "token",
	}}})
	if term, err := candidate.Elected(); term != 7 || err != nil || candidate.Err() != nil {
		t.Fatalf("elected: %d %v, Err %v", term, err, candidate.Err())
	}
	send(t, stream, &pb.CampaignResponse{Event: &pb.CampaignResponse_Lost{Lost: &pb.Lost{
		Reason: "revoked by an operator", Code: pb.LostReason_LOST_REASON_REVOKED,
	}}})
	elections.ends <- nil
	within(t, candidate.Done(), "Done() never closed")
	if err := candidate.Err(); !errors.Is(err, LostRevoked) || err.Error() != "leasehold: leadership lost: revoked by an operator" {
		t.Fatalf("Err: %v", err)
	}
	if err := candidate.Proclaim([]byte("b")); !errors.Is(err, LostRevoked) {
		t.Fatalf("proclaim: %v", err)
	}
	if wasLeader, err := candidate.Resign(); wasLeader || err != nil {
		t.Fatalf("resign: %v %v", wasLeader, err)
	}
}

// A session's lease revoked is lost alone with that reason; the session lost at its server's
// shutdown then loses the other with the session's reason, and says so itself.
func TestSessionLeasesKnowWhyTheyWereLost(t *testing.T) {
	session, stream, _ := openFake(t)
	idA, leases, _ := acquireOnFake(t, session, stream, "a")
	sendEvent(t, stream, acquiredEvent(idA, 1, 10_000, 0))
	a := <-leases
	idB, leases, _ := acquireOnFake(t, session, stream, "b")
	sendEvent(t, stream, acquiredEvent(idB, 2, 10_000, 0))
	b := <-leases
	sendEvent(t, stream, &pb.SessionResponse{Event: &pb.SessionResponse_LeaseLost{LeaseLost: &pb.SessionLeaseLost{
		Id: idA, Reason: "revoked by an operator", Code: pb.LostReason_LOST_REASON_REVOKED,
	}}})
	lostAlone(t, a, b, "revoked by an operator", 2*time.Second)
	if err := a.Err(); !errors.Is(err, LostRevoked) || errors.Is(err, ErrSessionLost) || session.Err() != nil {
		t.Fatalf("a's Err %v, the session's %v", err, session.Err())
	}
	sendEvent(t, stream, &pb.SessionResponse{Event: &pb.SessionResponse_Lost{Lost: &pb.Lost{
		Reason: "the server is shutting down", Code: pb.LostReason_LOST_REASON_SHUTDOWN,
	}}})
	within(t, b.Lost(), "b was not lost with its session")
	if err := b.Err(); !errors.Is(err, LostShutdown) || !errors.Is(err, ErrSessionLost) {
		t.Fatalf("b's Err: %v", err)
	}
	within(t, session.Lost(), "the session was not lost")
	if err := session.Err(); !errors.Is(err, LostShutdown) || !errors.Is(err, ErrSessionLost) ||
		err.Error() != "leasehold: session lost: the server is shutting down" {
		t.Fatalf("the session's Err: %v", err)
	}
	if err := session.Close(); !errors.Is(err, LostShutdown) {
		t.Fatalf("close: %v", err)
	}
}

func send[T any](t *testing.T, stream interface{ Send(*T) error }, msg *T) {
	t.Helper()
	if err := stream.Send(msg); err != nil {
		t.Fatal(err)
	}
}
