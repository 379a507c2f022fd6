// The streams deploy/prometheus/test.sh needs that the leasehold command line does not open: a
// campaign (so an election is led), an observer, and a session holding a lock. It holds them
// for -hold, then lets go of each and exits 0; any failure exits 1.
//
//	go run . -server 127.0.0.1:50051 -hold 5s
package main

import (
	"context"
	"flag"
	"log"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func main() {
	server := flag.String("server", "127.0.0.1:50051", "the Leasehold server")
	hold := flag.Duration("hold", 5*time.Second, "how long to keep the streams open")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *hold+30*time.Second)
	defer cancel()
	conn, err := leasehold.Dial(*server, leasehold.DialOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	candidate, err := leasehold.Campaign(ctx, conn, "load/leader", []byte("load"), 10*time.Second)
	if err != nil {
		log.Fatal("campaign: ", err)
	}
	if _, err := candidate.Elected(); err != nil {
		log.Fatal("elected: ", err)
	}
	watching, stop := context.WithCancel(ctx)
	leaders, _, err := leasehold.Observe(watching, conn, "load/leader")
	if err != nil {
		log.Fatal("observe: ", err)
	}
	if leader := <-leaders; leader == nil {
		log.Fatal("observe: no leader seen")
	}
	session, err := leasehold.NewSession(ctx, conn, leasehold.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal("session: ", err)
	}
	if _, err := session.Acquire(ctx, "load/session-lock", leasehold.LockOptions{}); err != nil {
		log.Fatal("session lock: ", err)
	}
	log.Printf("leading load/leader, observing it, and holding load/session-lock on a session for %s", *hold)
	time.Sleep(*hold)

	if err := session.Close(); err != nil {
		log.Fatal("session close: ", err)
	}
	stop()
	if _, err := candidate.Resign(); err != nil {
		log.Fatal("resign: ", err)
	}
}
