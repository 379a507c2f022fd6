package leasehold

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdpb"
)

// fakeLocks is a LockService a test drives by hand: each Lease stream is handed to the test and
// ends with what the test sends on ends (or when the client goes); Revoke records its request
// and answers `revoked`; Watch runs the test's watch, Check the test's check.
type fakeLocks struct {
	pb.UnimplementedLockServiceServer
	leases  chan pb.LockService_LeaseServer
	ends    chan error
	revokes chan *pb.RevokeRequest
	revoked []*pb.Holder
	watch   func(*pb.WatchRequest, pb.LockService_WatchServer) error
	check   func(*pb.CheckRequest) (*pb.CheckResponse, error)
}

func (f *fakeLocks) Lease(stream pb.LockService_LeaseServer) error {
	f.leases <- stream
	select {
	case err := <-f.ends:
		return err
	case <-stream.Context().Done():
		return nil
	}
}

func (f *fakeLocks) Revoke(_ context.Context, request *pb.RevokeRequest) (*pb.RevokeResponse, error) {
	f.revokes <- request
	return &pb.RevokeResponse{Revoked: f.revoked}, nil
}

func (f *fakeLocks) Watch(request *pb.WatchRequest, stream pb.LockService_WatchServer) error {
	return f.watch(request, stream)
}

func (f *fakeLocks) Check(_ context.Context, request *pb.CheckRequest) (*pb.CheckResponse, error) {
	return f.check(request)
}

// fakeElections is an ElectionService a test drives by hand, as fakeLocks.
type fakeElections struct {
	pb.UnimplementedElectionServiceServer
	campaigns chan pb.ElectionService_CampaignServer
	ends      chan error
	revokes   chan *pb.ElectionServiceRevokeRequest
	revoked   *pb.ElectionServiceRevokeResponse
}

func (f *fakeElections) Campaign(stream pb.ElectionService_CampaignServer) error {
	f.campaigns <- stream
	select {
	case err := <-f.ends:
		return err
	case <-stream.Context().Done():
		return nil
	}
}

func (f *fakeElections) Revoke(_ context.Context, request *pb.ElectionServiceRevokeRequest) (*pb.ElectionServiceRevokeResponse, error) {
	f.revokes <- request
	return f.revoked, nil
}

// serveFakes serves a fakeLocks and a fakeElections on a port of their own: a connection to
// them, and both.
func serveFakes(t *testing.T) (*grpc.ClientConn, *fakeLocks, *fakeElections) {
	locks := &fakeLocks{
		leases: make(chan pb.LockService_LeaseServer, 4), ends: make(chan error, 4),
		revokes: make(chan *pb.RevokeRequest, 4),
	}
	elections := &fakeElections{
		campaigns: make(chan pb.ElectionService_CampaignServer, 4), ends: make(chan error, 4),
		revokes: make(chan *pb.ElectionServiceRevokeRequest, 4),
	}
	conn := serveFake(t, func(server *grpc.Server) {
		pb.RegisterLockServiceServer(server, locks)
		pb.RegisterElectionServiceServer(server, elections)
	})
	return conn, locks, elections
}

// serveFake serves what register registers on a port of its own until the test ends: a
// connection to it.
func serveFake(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	register(server)
	go server.Serve(listener)
	t.Cleanup(server.Stop)
	conn, err := grpc.NewClient(listener.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// heldOnFake acquires "job" with opts from the fake locks, which answer `acquired` (fencing
// token 7, valid for 10 s): the lease, and its stream on the fake.
func heldOnFake(t *testing.T, conn *grpc.ClientConn, locks *fakeLocks, opts Options) (*Lease, pb.LockService_LeaseServer) {
	t.Helper()
	leases, failed := inBackground(func() (*Lease, error) {
		return Acquire(context.Background(), conn, "job", opts)
	})
	stream := within(t, locks.leases, "no Lease stream")
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	send(t, stream, &pb.LeaseResponse{Event: &pb.LeaseResponse_Acquired{Acquired: &pb.Acquired{
		Token: "token", FencingToken: 7, TtlMs: 10_000, ValidForMs: 10_000,
	}}})
	return awaitHeld(t, leases, failed, 2*time.Second, "not acquired"), stream
}

// notResumed fails if a second Lease stream was opened. Called once the lease's goroutine has
// ended (Release waits for it), which a resume would have done first.
func notResumed(t *testing.T, locks *fakeLocks) {
	t.Helper()
	select {
	case <-locks.leases:
		t.Fatal("a lost lease was resumed")
	default:
	}
}

// within is what arrives on c within 2 s, else the test fails saying `never`.
func within[T any](t *testing.T, c <-chan T, never string) T {
	t.Helper()
	select {
	case got := <-c:
		return got
	case <-time.After(2 * time.Second):
		t.Fatal(never)
	}
	panic("unreachable")
}
