package leasehold

import (
	"context"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func withDetails(t *testing.T, code codes.Code, message string, details ...*errdetails.ErrorInfo) *status.Status {
	t.Helper()
	st := status.New(code, message)
	for _, detail := range details {
		var err error
		if st, err = st.WithDetails(detail); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// The details are read from the status, whatever its message says.
func TestRefusalReadsErrorInfoAndRetryInfo(t *testing.T) {
	st := withDetails(t, codes.Aborted, "reworded at will",
		&errdetails.ErrorInfo{Domain: "elsewhere", Reason: "PROXY_SAYS"},
		&errdetails.ErrorInfo{Domain: ErrorDomain, Reason: "WAIT_EXPIRED",
			Metadata: map[string]string{"lock": "job", "holder": "someone", "waited_ms": "250"}})
	st, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	got := refusal(st.Err())
	var refused *Refusal
	if !errors.As(got, &refused) || !errors.Is(got, ErrNotAcquired) {
		t.Fatalf("%v", got)
	}
	if refused.Reason != "WAIT_EXPIRED" || refused.Holder != "someone" || refused.Metadata["waited_ms"] != "250" ||
		refused.RetryAfter != 1500*time.Millisecond || refused.Message != "reworded at will" {
		t.Fatalf("%+v", refused)
	}
	if status.Code(got) != codes.Aborted || status.Convert(got).Message() != "reworded at will" {
		t.Fatalf("as a status: %v", status.Convert(got))
	}
	if got.Error() != "leasehold: lock not acquired: reworded at will" {
		t.Fatalf("error: %q", got.Error())
	}
	if refusal(got) != got {
		t.Fatal("a refusal was converted twice")
	}
}

// A server without details still gives ErrNotAcquired (a Refusal with no reason) for ABORTED,
// and other errors unchanged.
func TestRefusalWithoutDetails(t *testing.T) {
	got := refusal(status.Error(codes.Aborted, "lock \"job\" is held by \"a\""))
	var refused *Refusal
	if !errors.As(got, &refused) || !errors.Is(got, ErrNotAcquired) || refused.Reason != "" ||
		refused.RetryAfter != 0 || refused.Metadata == nil {
		t.Fatalf("%v %+v", got, refused)
	}
	plain := status.Error(codes.Unavailable, "connection refused")
	if refusal(plain) != plain || refusal(io.EOF) != io.EOF || refusal(nil) != nil {
		t.Fatal("an error without details was converted")
	}
	foreign := withDetails(t, codes.Unavailable, "no healthy upstream",
		&errdetails.ErrorInfo{Domain: "envoy", Reason: "UPSTREAM"}).Err()
	if refusal(foreign) != foreign {
		t.Fatal("another domain's ErrorInfo was read as Leasehold's")
	}
}

// Every error with details is a Refusal, not only a taken lock; its status is unchanged.
func TestRefusalOfAnInvalidRequest(t *testing.T) {
	conn, _ := start(t)
	_, err := Acquire(context.Background(), conn, "", Options{})
	var refused *Refusal
	if !errors.As(err, &refused) || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("empty name: %v", err)
	}
	if refused.Code != codes.InvalidArgument || refused.Reason != "INVALID_REQUEST" ||
		status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != refused.Message {
		t.Fatalf("refusal: %+v", refused)
	}
}

func TestRefusalAfterAWait(t *testing.T) {
	conn, _ := start(t)
	ctx := context.Background()
	lease, err := Acquire(ctx, conn, "job", Options{TTL: 30 * time.Second, Holder: "holder-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	_, err = Acquire(ctx, conn, "job", Options{Wait: 200 * time.Millisecond})
	var refused *Refusal
	if !errors.As(err, &refused) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("acquire after a wait: %v", err)
	}
	waited, _ := strconv.Atoi(refused.Metadata["waited_ms"])
	if refused.Reason != "WAIT_EXPIRED" || refused.Holder != "holder-a" || waited < 200 ||
		refused.RetryAfter <= 0 || refused.RetryAfter > 30*time.Second {
		t.Fatalf("refusal: %+v", refused)
	}
}

func TestListStopsAtItsLimit(t *testing.T) {
	conn, _ := start(t)
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c"} {
		lease, err := Acquire(ctx, conn, name, Options{Limit: 2, Holder: "holder-" + name})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release()
	}
	all, err := List(ctx, conn, 0)
	if err != nil || len(all.Locks) != 3 || all.Truncated {
		t.Fatalf("list: %+v %v", all, err)
	}
	for _, lock := range all.Locks {
		if lock.Holder != "holder-"+lock.Name || lock.Limit != 2 || lock.Shared || len(lock.Holders) != 1 ||
			lock.Holders[0].FencingToken != lock.FencingToken || lock.TTLRemaining <= 0 {
			t.Fatalf("listed: %+v", lock)
		}
	}
	some, err := List(ctx, conn, 2)
	if err != nil || len(some.Locks) != 2 || !some.Truncated {
		t.Fatalf("list of 2: %+v %v", some, err)
	}
}
