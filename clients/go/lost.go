// Why a lease, a leadership or a session was lost, as a type programs can branch on: the
// server's Lost.code, or this process's own verdict when it decided (its clock ran out, a resume
// was refused). The words (LostReason() string) stay for people and may be reworded.

package leasehold

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// LostReason is why something held was lost, for programs. It is an error, as syscall.Errno
// is, so that one reason can be picked out of any error this package gives for a loss:
//
//	<-lease.Lost()
//	if errors.Is(lease.Err(), leasehold.LostRevoked) { ... an operator took it away ... }
//
// The values are the wire's (leaseholdpb.LostReason); one this package does not know yet
// (from a newer server) keeps its number.
type LostReason int32

const (
	// LostUnspecified: a server that predates the code said so, or the caller's own context
	// ended it (errors.Is(err, context.Canceled) then holds as well).
	LostUnspecified LostReason = LostReason(pb.LostReason_LOST_REASON_UNSPECIFIED)
	// LostTaken: the key was deleted, expired or holds another holder's token; also a resume
	// that found it gone (NOT_FOUND) or held with another fencing token.
	LostTaken LostReason = LostReason(pb.LostReason_LOST_REASON_TAKEN)
	// LostUnreachable: no renewal could be confirmed before it ran out: Redis or the server
	// unreachable, frozen or too slow (the server said so, or this process's clock ended it,
	// or no server could resume it in time).
	LostUnreachable LostReason = LostReason(pb.LostReason_LOST_REASON_UNREACHABLE)
	// LostShutdown: its server shut down and it had no resume grace (NoResume).
	LostShutdown LostReason = LostReason(pb.LostReason_LOST_REASON_SHUTDOWN)
	// LostRevoked: an operator revoked it (Revoke, RevokeLeader). It is not resumed.
	LostRevoked LostReason = LostReason(pb.LostReason_LOST_REASON_REVOKED)
	// LostMaxHold: it reached its max hold (Options.MaxHold): the server stopped renewing it,
	// or this process's clock reached the ceiling first. It is not resumed.
	LostMaxHold LostReason = LostReason(pb.LostReason_LOST_REASON_MAX_HOLD)
)

var lostReasonNames = map[LostReason]string{
	LostUnspecified: "unspecified", LostTaken: "taken", LostUnreachable: "unreachable",
	LostShutdown: "shutdown", LostRevoked: "revoked", LostMaxHold: "max_hold",
}

func (r LostReason) String() string { return nameOf(lostReasonNames, r, "LostReason") }

// nameOf is a wire enum's value v by its name, else `kind(number)`: a value this package does
// not know yet (from a newer server) keeps its number.
func nameOf[T ~int32](names map[T]string, v T, kind string) string {
	if name, ok := names[v]; ok {
		return name
	}
	return kind + "(" + strconv.Itoa(int(v)) + ")"
}

// Error makes a LostReason a target of errors.Is.
func (r LostReason) Error() string { return "leasehold: lost: " + r.String() }

// LostError is why something held was lost: the reason for programs, the words for people.
// Err of a Lease, a SessionLease and a SessionLeader returns one once Lost is closed; a lost
// leadership's Candidate.Err and Elected, and every call on a lost Session (Session.Err,
// Close), return one too. errors.Is(err, r) holds for its Reason r; errors.Is(err,
// ErrSessionLost) for a session's; errors.As finds the *Refusal that caused it, if any.
type LostError struct {
	Reason  LostReason
	Message string // why, in words: what LostReason() says

	what   string  // "lease", "leadership", "session": how Error begins
	causes []error // what else it wraps: the caller's context error, a refusal, ErrSessionLost
}

func (e *LostError) Error() string { return "leasehold: " + e.what + " lost: " + e.Message }

// Unwrap gives the Reason, and whatever caused the loss.
func (e *LostError) Unwrap() []error { return append([]error{e.Reason}, e.causes...) }

// lostBy is a loss of `what` for `reason`, described by `message`, caused by whatever of
// causes is not nil.
func lostBy(what string, reason LostReason, message string, causes ...error) *LostError {
	e := &LostError{Reason: reason, Message: message, what: what}
	for _, cause := range causes {
		if cause != nil {
			e.causes = append(e.causes, cause)
		}
	}
	return e
}

// as is the same loss, told of another thing held (a session's loss, to each of its leases).
func (e *LostError) as(what string) *LostError {
	return &LostError{Reason: e.Reason, Message: e.Message, what: what, causes: e.causes}
}

// fromWire is the reason a server's `lost` gives.
func fromWire(code pb.LostReason) LostReason { return LostReason(code) }

// refusedResume is why a hold whose resume the server refused is lost: NOT_FOUND says its key is
// gone (expired, taken, revoked); news too late to believe says the network held it up.
func refusedResume(err error) LostReason {
	switch {
	case errors.Is(err, ErrStale):
		return LostUnreachable
	case status.Code(err) == codes.NotFound:
		return LostTaken
	}
	return LostUnspecified
}

// streamEnded is why a hold whose stream ended for good (not resumed) with err is lost: a stream
// cut off with resumption off is unreachable; the caller's context ending it, or a server's
// answer (which the LostError wraps), is unspecified.
func streamEnded(ctx context.Context, err error) LostReason {
	if ctx.Err() != nil || !transient(err) {
		return LostUnspecified // the caller's choice, or the server's answer (wrapped)
	}
	return LostUnreachable
}
