// Package leasehold holds Leasehold locks from Go, over the Lease stream, or many of them on one
// Session stream.
//
//	conn, _ := leasehold.Dial("10.0.0.1:50051,10.0.0.2:50051", leasehold.DialOptions{})
//	lease, err := leasehold.Acquire(ctx, conn, "nightly-report", leasehold.Options{TTL: 10 * time.Second})
//	if err != nil { ... } // errors.Is(err, leasehold.ErrNotAcquired) when the lock stays taken
//	defer lease.Release()
//	select {
//	case <-lease.Lost(): // stop work: lease.LostReason() says why, lease.Err() for programs
//	case <-work(lease.FencingToken):
//	}
//
// A held lease outlives its server: when its stream breaks (the server shut down for a deploy,
// crashed, or the connection failed) the lease is resumed on a server that answers, with the
// same token and fencing token, without a word to the caller. Options.NoResume turns that off.
//
// Lost() is closed when the server says the lease is lost, when the stream breaks and the lease
// cannot be resumed (or resumption is off), or when the validity the server last confirmed runs
// out by this process's clock. Err() then is a *LostError whose Reason (LostTaken,
// LostUnreachable, LostShutdown, LostRevoked, LostMaxHold) programs branch on with errors.Is.
//
// Options.MoreNames holds several names at once, all or none, with a fencing token each
// (Lease.Fences); Options.LockDelay keeps the names from the next holder for a while after a
// loss; Options.MaxHold is a ceiling on the hold (LostMaxHold). Check asks whether a fencing
// token is still a name's holding, for the protected resource to ask before a write.
//
// Operators have Revoke and RevokeLeader (end a holding by force; its holder hears LostRevoked)
// and Watch (a lock's state on every change, as an iterator).
//
// A process that holds many locks (one per shard, per customer, per job) holds them on one
// Session instead, as etcd's concurrency package hangs mutexes and elections on one session:
// one stream, renewed and confirmed as one, resumed as one when its server goes away.
//
//	session, _ := leasehold.NewSession(ctx, conn, leasehold.SessionOptions{TTL: 10 * time.Second})
//	defer session.Close() // releases every lease still held on it
//	lease, err := session.Acquire(ctx, "shard-7", leasehold.LockOptions{Wait: time.Second})
//	if err != nil { ... } // the errors Acquire gives: ErrNotAcquired, *Refusal
//	defer lease.Release()
//	select {
//	case <-lease.Lost(): // this lease alone (lease.LostReason()); session.Lost() for all of them
//	case <-work(lease.FencingToken):
//	}
//	leader, err := session.Campaign(ctx, "scheduler", []byte("host-a")) // waits until it leads
//
// An error the server answers with its details is a *Refusal: the reason (LOCK_HELD,
// WAIT_EXPIRED, ...), the holder, when to retry and the other named values, as fields
// (errors.As), never to be parsed from the message.
package leasehold
