package leasehold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// Leader is an election's leader: its term (the leadership lease's fencing token, larger for
// every new leader) and the value it published.
type Leader struct {
	Term  uint64
	Value []byte
}

// Candidate is one candidacy in an election, held by one Campaign stream. Cancelling the context
// given to Campaign steps down (or leaves the line), like Resign without waiting for the answer.
type Candidate struct {
	stream pb.ElectionService_CampaignClient
	cancel context.CancelFunc
}

// Campaign joins `election` as a candidate publishing `value` and returns at once; Elected waits
// in line. ttl bounds how long the election stays leaderless if this process's server dies while
// it leads.
func Campaign(ctx context.Context, conn grpc.ClientConnInterface, election string, value []byte, ttl time.Duration) (*Candidate, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := pb.NewElectionServiceClient(conn).Campaign(ctx)
	if err == nil {
		err = stream.Send(&pb.CampaignRequest{Action: &pb.CampaignRequest_Start{Start: &pb.CampaignStart{
			Election: election, Value: value, TtlMs: uint32(ttl.Milliseconds()),
		}}})
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &Candidate{stream: stream, cancel: cancel}, nil
}

func (c *Candidate) next() (*pb.CampaignResponse, error) {
	msg, err := c.stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("leasehold: campaign stream ended")
	}
	return msg, err
}

// Elected waits until this candidate leads and returns its term.
func (c *Candidate) Elected() (uint64, error) {
	msg, err := c.next()
	if err != nil {
		return 0, err
	}
	if elected := msg.GetElected(); elected != nil {
		return elected.Term, nil
	}
	return 0, fmt.Errorf("leasehold: expected elected, got %v", msg)
}

// Proclaim publishes a new value while leading.
func (c *Candidate) Proclaim(value []byte) error {
	err := c.stream.Send(&pb.CampaignRequest{Action: &pb.CampaignRequest_Proclaim{Proclaim: &pb.Proclaim{Value: value}}})
	if err != nil {
		return err
	}
	msg, err := c.next()
	switch {
	case err != nil:
		return err
	case msg.GetProclaimed() != nil:
		return nil
	case msg.GetLost() != nil:
		return fmt.Errorf("leasehold: leadership lost: %s", msg.GetLost().Reason)
	default:
		return fmt.Errorf("leasehold: expected proclaimed, got %v", msg)
	}
}

// Lost waits until the leadership is lost and returns the reason. Call it only while leading.
func (c *Candidate) Lost() string {
	for {
		msg, err := c.next()
		if err != nil {
			return err.Error()
		}
		if lost := msg.GetLost(); lost != nil {
			return lost.Reason
		}
	}
}

// Resign steps down now and reports whether this candidate was leading.
func (c *Candidate) Resign() (bool, error) {
	defer c.cancel()
	err := c.stream.Send(&pb.CampaignRequest{Action: &pb.CampaignRequest_Resign{Resign: &pb.Resign{}}})
	if err != nil {
		return false, err
	}
	for {
		msg, err := c.next()
		if err != nil {
			return false, err
		}
		if resigned := msg.GetResigned(); resigned != nil {
			return resigned.WasLeader, nil
		}
		if msg.GetLost() != nil {
			return false, nil
		}
	}
}

// CurrentLeader returns the leader of `election` now, or nil when it has none.
func CurrentLeader(ctx context.Context, conn grpc.ClientConnInterface, election string) (*Leader, error) {
	answer, err := pb.NewElectionServiceClient(conn).Leader(ctx, &pb.LeaderRequest{Election: election})
	if err != nil || !answer.HasLeader {
		return nil, err
	}
	return &Leader{Term: answer.Term, Value: answer.Value}, nil
}

// Observe follows `election`: the channel receives the current leader first (nil for none), then
// every change in the order they happened. It closes when ctx ends or the stream fails; the
// returned function then reports why.
func Observe(ctx context.Context, conn grpc.ClientConnInterface, election string) (<-chan *Leader, func() error, error) {
	stream, err := pb.NewElectionServiceClient(conn).Observe(ctx, &pb.ObserveRequest{Election: election})
	if err != nil {
		return nil, nil, err
	}
	changes := make(chan *Leader)
	var failure error
	go func() {
		defer close(changes)
		for {
			msg, err := stream.Recv()
			if err != nil {
				failure = err
				return
			}
			var leader *Leader
			if msg.HasLeader {
				leader = &Leader{Term: msg.Term, Value: msg.Value}
			}
			select {
			case changes <- leader:
			case <-ctx.Done():
				failure = ctx.Err()
				return
			}
		}
	}()
	return changes, func() error { return failure }, nil
}
