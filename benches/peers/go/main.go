// Command peers measures, from Go, what a Go user would pick instead of Leasehold, beside the
// baseline a Go user could write by hand on the same Redis (scripts/bench-peers.sh runs it):
//
//   - go-redis: SET NX PX + the compare-and-delete script (EVALSHA), the direct-Redis baseline
//     in Go, so a peer's ratio is to Redis reached through the same language's client;
//   - Leasehold through its Go client (clients/go), when -leasehold is given: Acquire + Release
//     (a Lease stream);
//   - redsync (go-redsync, on go-redis) with one Redis: Mutex.Lock + Unlock;
//   - etcd, when -etcd is given: etcd's Go client as its users lock (concurrency.Mutex over
//     one Session, so the lease is granted once), and etcd's server-side lock API (v3lockpb
//     Lock/Unlock with that same lease).
//
// Then, contended, the hand-off: one holder, one waiter blocked in Lock; from the holder's
// Unlock to the waiter holding. redsync's waiter retries (its default: 32 tries, 50-250 ms
// apart), etcd's watches the key before it, Leasehold's waits in the server's line and is woken
// by the release.
//
// One client, one lock, acquire + release back to back. The paths take turns in rounds so a
// slow spell of a shared machine falls on all of them. Each path prints one line,
// "ROW<TAB>path<TAB>ops<TAB>p50_us<TAB>p99_us<TAB>ops_per_s", which the script tabulates.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
)

// The compare-and-delete every Redis lock releases with: delete the key only if it still holds
// our token.
const release = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

const rounds = 5

type path struct {
	name    string
	once    func(ctx context.Context) error
	samples []time.Duration
	total   time.Duration
}

func main() {
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis host:port")
	etcdAddr := flag.String("etcd", "", "etcd client URL (empty: etcd not measured)")
	leaseholdAddr := flag.String("leasehold", "", "Leasehold server host:port (empty: not measured)")
	ops := flag.Int("ops", 5000, "acquire+release pairs per path")
	handoffs := flag.Int("handoffs", 20, "hand-offs per lock")
	flag.Parse()
	if err := run(*redisAddr, *etcdAddr, *leaseholdAddr, *ops, *handoffs); err != nil {
		fmt.Fprintln(os.Stderr, "peers (go):", err)
		os.Exit(1)
	}
}

func run(redisAddr, etcdAddr, leaseholdAddr string, ops, handoffs int) error {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	script := redis.NewScript(release)
	direct := func(ctx context.Context) error {
		token := randomToken()
		ok, err := rdb.SetNX(ctx, "bench-go-direct", token, 30*time.Second).Result()
		if err != nil || !ok {
			return fmt.Errorf("direct SET NX: %v %v", ok, err)
		}
		n, err := script.Run(ctx, rdb, []string{"bench-go-direct"}, token).Int()
		if err != nil || n != 1 {
			return fmt.Errorf("direct release: %v %v", n, err)
		}
		return nil
	}
	rs := redsync.New(goredis.NewPool(rdb))
	mutex := rs.NewMutex("bench-redsync", redsync.WithExpiry(30*time.Second), redsync.WithTries(1))
	redsyncOnce := func(ctx context.Context) error {
		if err := mutex.LockContext(ctx); err != nil {
			return fmt.Errorf("redsync lock: %w", err)
		}
		if ok, err := mutex.UnlockContext(ctx); err != nil || !ok {
			return fmt.Errorf("redsync unlock: %v %v", ok, err)
		}
		return nil
	}
	// Two clients of the same lock for the hand-off, each with redsync's default retries.
	contenders := [2]locker{}
	for i := range contenders {
		m := rs.NewMutex("bench-redsync-handoff", redsync.WithExpiry(30*time.Second))
		contenders[i] = locker{
			lock:   m.LockContext,
			unlock: func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err },
		}
	}
	handoffPaths := []handoffPath{{name: "hand-off: redsync (default retries: 50-250 ms apart)", pair: contenders}}
	paths := []*path{
		{name: "go-redis SET NX PX + compare-and-delete", once: direct},
		{name: "redsync (1 Redis, go-redis)", once: redsyncOnce},
	}
	if leaseholdAddr != "" {
		conn, err := leasehold.Dial(leaseholdAddr, leasehold.DialOptions{})
		if err != nil {
			return fmt.Errorf("leasehold dial: %w", err)
		}
		defer conn.Close()
		paths = append(paths, &path{name: "Leasehold Lease stream (Go client)", once: func(ctx context.Context) error {
			lease, err := leasehold.Acquire(ctx, conn, "bench-go-leasehold", leasehold.Options{TTL: 30 * time.Second})
			if err != nil {
				return fmt.Errorf("leasehold acquire: %w", err)
			}
			_, err = lease.Release()
			return err
		}})
		var pair [2]locker
		for i := range pair {
			var held *leasehold.Lease
			pair[i] = locker{
				lock: func(ctx context.Context) (err error) {
					held, err = leasehold.Acquire(ctx, conn, "bench-go-leasehold-handoff",
						leasehold.Options{TTL: 30 * time.Second, Wait: 30 * time.Second})
					return err
				},
				unlock: func(context.Context) error { _, err := held.Release(); return err },
			}
		}
		handoffPaths = append(handoffPaths, handoffPath{name: "hand-off: Leasehold (Go client; pushed wake-up)", pair: pair})
	}
	if etcdAddr != "" {
		etcdPaths, etcdHandoff, closeEtcd, err := etcd(ctx, etcdAddr)
		if err != nil {
			return err
		}
		defer closeEtcd()
		paths = append(paths, etcdPaths...)
		handoffPaths = append(handoffPaths, etcdHandoff)
	}
	// Warm every path: connections made, scripts loaded.
	for _, p := range paths {
		for i := 0; i < 50; i++ {
			if err := p.once(ctx); err != nil {
				return err
			}
		}
	}
	perRound := (ops + rounds - 1) / rounds
	for r := 0; r < rounds; r++ {
		for _, p := range paths {
			started := time.Now()
			for i := 0; i < perRound; i++ {
				t := time.Now()
				if err := p.once(ctx); err != nil {
					return err
				}
				p.samples = append(p.samples, time.Since(t))
			}
			p.total += time.Since(started)
		}
	}
	for _, p := range paths {
		s := p.samples
		fmt.Printf("ROW\t%s\t%d\t%.1f\t%.1f\t%.0f\n", p.name, len(s), quantile(s, 0.5), quantile(s, 0.99), float64(len(s))/p.total.Seconds())
	}
	for _, h := range handoffPaths {
		s, err := handoff(ctx, h.pair, handoffs)
		if err != nil {
			return err
		}
		fmt.Printf("ROW\t%s\t%d\t%.1f\t%.1f\t-\n", h.name, len(s), quantile(s, 0.5), quantile(s, 0.99))
	}
	return nil
}

type locker struct {
	lock, unlock func(ctx context.Context) error
}

type handoffPath struct {
	name string
	pair [2]locker
}

// handoff times, n times, how long a waiter blocked in Lock takes to hold the lock once its
// holder unlocks; the unlock lands at a random point of the waiter's wait (50-450 ms in).
func handoff(ctx context.Context, pair [2]locker, n int) ([]time.Duration, error) {
	var samples []time.Duration
	for i := 0; i < n; i++ {
		holder, waiter := pair[i%2], pair[(i+1)%2]
		if err := holder.lock(ctx); err != nil {
			return nil, fmt.Errorf("hand-off holder: %w", err)
		}
		held := make(chan error, 1)
		var at time.Time
		go func() {
			err := waiter.lock(ctx)
			at = time.Now()
			held <- err
		}()
		time.Sleep(50*time.Millisecond + time.Duration(randomInt(400))*time.Millisecond)
		released := time.Now()
		if err := holder.unlock(ctx); err != nil {
			return nil, fmt.Errorf("hand-off release: %w", err)
		}
		select {
		case err := <-held:
			if err != nil {
				return nil, fmt.Errorf("hand-off waiter: %w", err)
			}
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("hand-off: the waiter never got the lock")
		}
		samples = append(samples, at.Sub(released))
		if err := waiter.unlock(ctx); err != nil {
			return nil, fmt.Errorf("hand-off waiter release: %w", err)
		}
	}
	return samples, nil
}

func quantile(samples []time.Duration, f float64) float64 {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[min(len(s)-1, int(f*float64(len(s))))].Nanoseconds()) / 1e3
}

func randomInt(n int) int {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return (int(b[0])<<8 | int(b[1])) % n
}

// etcd's two ways to lock, sharing one client and one lease (a Session), as its users do.
func etcd(ctx context.Context, addr string) ([]*path, handoffPath, func(), error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 20 * time.Second})
	if err != nil {
		return nil, handoffPath{}, nil, fmt.Errorf("etcd connect: %w", err)
	}
	// Three sessions (leases): the measured one, and two contenders for the hand-off.
	var sessions [3]*concurrency.Session
	for i := range sessions {
		sessions[i], err = concurrency.NewSession(cli, concurrency.WithTTL(30))
		if err != nil {
			cli.Close()
			return nil, handoffPath{}, nil, fmt.Errorf("etcd session: %w", err)
		}
	}
	session := sessions[0]
	h := handoffPath{name: "hand-off: etcd concurrency.Mutex (watches its predecessor)"}
	for i := range h.pair {
		m := concurrency.NewMutex(sessions[i+1], "bench-etcd-handoff")
		h.pair[i] = locker{lock: m.Lock, unlock: m.Unlock}
	}
	mutex := concurrency.NewMutex(session, "bench-etcd-mutex")
	locks := v3lockpb.NewLockClient(cli.ActiveConnection())
	paths := []*path{
		{name: "etcd concurrency.Mutex (Go client)", once: func(ctx context.Context) error {
			if err := mutex.Lock(ctx); err != nil {
				return fmt.Errorf("etcd mutex lock: %w", err)
			}
			return mutex.Unlock(ctx)
		}},
		{name: "etcd v3lock Lock/Unlock", once: func(ctx context.Context) error {
			locked, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("bench-etcd-v3lock"), Lease: int64(session.Lease())})
			if err != nil {
				return fmt.Errorf("etcd v3lock: %w", err)
			}
			_, err = locks.Unlock(ctx, &v3lockpb.UnlockRequest{Key: locked.Key})
			return err
		}},
	}
	return paths, h, func() {
		for _, s := range sessions {
			s.Close()
		}
		cli.Close()
	}, nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
