package leasehold

import (
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNotAcquired: the lock stayed taken for the whole wait (status ABORTED). The error is a
// *Refusal that says by whom and when to try again:
//
//	var refusal *leasehold.Refusal
//	if errors.As(err, &refusal) { ... refusal.Holder, refusal.RetryAfter ... }
var ErrNotAcquired = errors.New("leasehold: lock not acquired")

// ErrorDomain is the domain of the google.rpc.ErrorInfo the server attaches to every error.
const ErrorDomain = "leasehold"

// Refusal is an error the server answered with its details (docs/errors.md): the status, and
// the google.rpc.ErrorInfo and google.rpc.RetryInfo it carries, as fields to program against
// instead of the message, which may be reworded. Every call of this package returns one for a
// status with Leasehold's ErrorInfo, and for any ABORTED status (the lock is taken), where
// errors.Is(err, ErrNotAcquired) holds as well. status.Code and status.Convert read it as the
// status it came from.
type Refusal struct {
	Code    codes.Code // the status code, e.g. codes.Aborted for a taken lock
	Message string     // the status message, for people
	// Reason names the refusal: LOCK_HELD, WAIT_EXPIRED, NO_MAJORITY, LIMIT_MISMATCH, ...
	// (docs/errors.md); empty from a server that sends no details.
	Reason string
	// Holder is who holds the lock (the metadata's "holder") for LOCK_HELD and WAIT_EXPIRED.
	Holder string
	// RetryAfter is when a retry is worth it (google.rpc.RetryInfo): for a taken lock the
	// holder's remaining TTL. 0 when the server gave none.
	RetryAfter time.Duration
	// Metadata holds the ErrorInfo's named values (all strings), e.g. "lock", "waited_ms".
	Metadata map[string]string

	status *status.Status
}

func (r *Refusal) Error() string {
	if r.Code == codes.Aborted {
		return ErrNotAcquired.Error() + ": " + r.Message
	}
	return r.status.Err().Error()
}

// Unwrap gives ErrNotAcquired for an ABORTED refusal (the lock stayed taken).
func (r *Refusal) Unwrap() error {
	if r.Code == codes.Aborted {
		return ErrNotAcquired
	}
	return nil
}

// GRPCStatus is the status the server answered, details included (for status.FromError).
func (r *Refusal) GRPCStatus() *status.Status { return r.status }

// refusal is the one place a server's status becomes this package's error: a *Refusal when the
// status carries Leasehold's ErrorInfo or is ABORTED, else err unchanged (nil, io.EOF, a
// status without details such as the caller's own cancellation).
func refusal(err error) error {
	if err == nil {
		return nil
	}
	var already *Refusal
	var lost *LostError // a loss, which may wrap a status: kept as it is
	if errors.As(err, &already) || errors.As(err, &lost) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	r := &Refusal{Code: st.Code(), Message: st.Message(), status: st}
	var info *errdetails.ErrorInfo
	for _, detail := range st.Details() {
		switch detail := detail.(type) {
		case *errdetails.ErrorInfo:
			if detail.GetDomain() == ErrorDomain && info == nil {
				info = detail
			}
		case *errdetails.RetryInfo:
			if detail.GetRetryDelay() != nil {
				r.RetryAfter = max(detail.GetRetryDelay().AsDuration(), 0)
			}
		}
	}
	if info == nil && r.Code != codes.Aborted {
		return err
	}
	if info != nil {
		r.Reason, r.Metadata, r.Holder = info.GetReason(), info.GetMetadata(), info.GetMetadata()["holder"]
	}
	if r.Metadata == nil {
		r.Metadata = map[string]string{}
	}
	return r
}
