// Package leasehold holds Leasehold locks from Go, over the Lease stream.
//
//	conn, _ := grpc.NewClient("127.0.0.1:50051", grpc.WithTransportCredentials(insecure.NewCredentials()))
//	lease, err := leasehold.Acquire(ctx, conn, "nightly-report", leasehold.Options{TTL: 10 * time.Second})
//	if err != nil { ... } // errors.Is(err, leasehold.ErrNotAcquired) when the lock stays taken
//	defer lease.Release()
//	select {
//	case <-lease.Lost(): // stop work: lease.LostReason() says why
//	case <-work(lease.FencingToken):
//	}
//
// Lost() is closed when the server says the lease is lost, when the stream breaks, or when the
// validity the server last confirmed runs out by this process's clock.
package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// ErrNotAcquired: the lock stayed taken for the whole wait (status ABORTED).
var ErrNotAcquired = errors.New("leasehold: lock not acquired")

// Options of one lease.
type Options struct {
	TTL    time.Duration // default 30s
	Wait   time.Duration // 0: fail at once
	Holder string        // shown to others who find the lock taken
	// Limit lets up to that many leases hold the name at once (a semaphore; 0 or 1: a plain
	// lock). Every holder of one name must give the same limit (else FAILED_PRECONDITION).
	Limit uint32
	// Shared holds the name with other shared leases (readers); an exclusive one (a writer)
	// waits for them all, and readers that come after a waiting writer wait behind it.
	Shared bool
	// ResumeGrace keeps the lease that long (at most TTL) after the stream breaks, so that
	// Options{ResumeToken: lease.Token} can take it back with its fencing token.
	ResumeGrace time.Duration
	// ResumeToken reattaches to the lease this token holds instead of taking a new one
	// (NOT_FOUND once it is gone).
	ResumeToken string
}

// Lease is a held lock.
type Lease struct {
	FencingToken uint64
	Token        string

	stream   pb.LockService_LeaseClient
	cancel   context.CancelFunc
	lost     chan struct{}
	released chan struct{}

	mu         sync.Mutex
	lostReason string
	wasHeld    bool
}

// Acquire takes the lock `name`, waiting up to opts.Wait.
func Acquire(ctx context.Context, conn *grpc.ClientConn, name string, opts Options) (*Lease, error) {
	if opts.TTL == 0 {
		opts.TTL = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := pb.NewLockServiceClient(conn).Lease(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	err = stream.Send(&pb.LeaseRequest{Action: &pb.LeaseRequest_Acquire{Acquire: &pb.LeaseAcquire{
		Name: name, TtlMs: uint32(opts.TTL.Milliseconds()), WaitMs: uint32(opts.Wait.Milliseconds()),
		Holder: opts.Holder, Limit: opts.Limit, Mode: mode(opts.Shared),
		ResumeGraceMs: uint32(opts.ResumeGrace.Milliseconds()), ResumeToken: opts.ResumeToken,
	}}})
	if err != nil {
		cancel()
		return nil, err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			cancel()
			if status.Code(err) == codes.Aborted {
				return nil, fmt.Errorf("%w: %s", ErrNotAcquired, status.Convert(err).Message())
			}
			return nil, err
		}
		if acquired := msg.GetAcquired(); acquired != nil {
			lease := &Lease{
				FencingToken: acquired.FencingToken,
				Token:        acquired.Token,
				stream:       stream,
				cancel:       cancel,
				lost:         make(chan struct{}),
				released:     make(chan struct{}),
			}
			go lease.watch(time.Duration(acquired.ValidForMs) * time.Millisecond)
			return lease, nil
		}
	}
}

func mode(shared bool) pb.LeaseMode {
	if shared {
		return pb.LeaseMode_LEASE_MODE_SHARED
	}
	return pb.LeaseMode_LEASE_MODE_EXCLUSIVE
}

// Lost is closed once the lock can no longer be trusted.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// LostReason says why Lost was closed.
func (l *Lease) LostReason() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostReason
}

func (l *Lease) lose(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.lost:
	case <-l.released:
	default:
		l.lostReason = reason
		close(l.lost)
	}
}

func (l *Lease) watch(validFor time.Duration) {
	events := make(chan *pb.LeaseResponse)
	failed := make(chan error, 1)
	go func() {
		for {
			msg, err := l.stream.Recv()
			if err != nil {
				failed <- err
				return
			}
			events <- msg
		}
	}()
	timer := time.NewTimer(validFor)
	defer timer.Stop()
	for {
		select {
		case msg := <-events:
			switch {
			case msg.GetExtended() != nil:
				if !timer.Stop() {
					<-timer.C
				}
				timer.Reset(time.Duration(msg.GetExtended().ValidForMs) * time.Millisecond)
			case msg.GetLost() != nil:
				l.lose(msg.GetLost().Reason)
			case msg.GetReleased() != nil:
				l.mu.Lock()
				l.wasHeld = msg.GetReleased().WasHeld
				l.mu.Unlock()
				close(l.released)
				return
			}
		case err := <-failed:
			l.lose("lease stream ended: " + err.Error())
			close(l.released)
			return
		case <-timer.C:
			l.lose("no renewal confirmed before the lease ran out (server silent)")
		}
	}
}

// Release gives the lock up and reports whether it was still held.
func (l *Lease) Release() (bool, error) {
	defer l.cancel()
	err := l.stream.Send(&pb.LeaseRequest{Action: &pb.LeaseRequest_Release{Release: &pb.LeaseRelease{}}})
	if err == nil {
		err = l.stream.CloseSend()
	}
	select {
	case <-l.released:
	case <-time.After(10 * time.Second):
		return false, errors.New("leasehold: no answer to release")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.lost:
		return false, err
	default:
		return l.wasHeld, err
	}
}
