// Holds the lock "nightly-report" while it works, stopping if the lock is lost.
// The server is $LEASEHOLD_SERVER (one address, or every replica: "a:50051,b:50051"), else
// 127.0.0.1:50051, where scripts/serve.sh starts one. In clients/go:
//
//	LEASEHOLD_SERVER=127.0.0.1:50051 go run ./examples/hold
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func main() {
	server := os.Getenv("LEASEHOLD_SERVER") // one address, or every replica: "a:50051,b:50051"
	if server == "" {
		server = "127.0.0.1:50051"
	}
	conn, err := leasehold.Dial(server, leasehold.DialOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	lease, err := leasehold.Acquire(ctx, conn, "nightly-report",
		leasehold.Options{TTL: 10 * time.Second, Wait: 30 * time.Second, Holder: "report@host-a"})
	if errors.Is(err, leasehold.ErrNotAcquired) {
		log.Fatal("still taken after 30s: ", err)
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding nightly-report, fencing token", lease.FencingToken)
	select {
	case <-lease.Lost():
		fmt.Println("lost the lock:", lease.LostReason())
	case <-time.After(500 * time.Millisecond):
		fmt.Println("work done")
	}
	held, err := lease.Release()
	fmt.Println("released:", held, err)
}
