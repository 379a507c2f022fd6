package leasehold

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
)

// DialOptions say how to reach a server: TLS, and a bearer token.
type DialOptions struct {
	// Token is sent with every call as "authorization: Bearer <token>" (the server's
	// --auth-file grants it).
	Token string
	// TLS turns TLS on; it is on as well when RootCAs or a client certificate is given.
	TLS bool
	// RootCAs (PEM) to trust for the server's certificate; nil: the system's roots.
	RootCAs []byte
	// CertPEM and KeyPEM: a client certificate for mutual TLS.
	CertPEM, KeyPEM []byte
}

// Dial opens a connection to Leasehold servers for Acquire, Campaign and the other calls.
//
// target is one address ("127.0.0.1:50051"), a DNS name ("leasehold.internal:50051" or
// "dns:///leasehold.internal:50051": every address it resolves to is a candidate), any other
// grpc-go target ("unix:///run/leasehold.sock"), or a comma-separated list of addresses
// ("10.0.0.1:50051,10.0.0.2:50051"; a name in the list is resolved when dialled). Calls and
// streams go to one reachable server at a time, grpc-go's pick_first: the first address, in
// order, that accepts a connection. When that server goes away (shut down, crashed,
// unreachable) the connection moves to the next one that answers, and held leases and
// leaderships resume there (see Options.NoResume). Reconnection backs off from 100 ms to at
// most 3 s, so that a lease can be resumed within its validity.
func Dial(target string, opts DialOptions) (*grpc.ClientConn, error) {
	// The URL form the other clients and the CLI take names the same server (https: with TLS).
	if rest, ok := strings.CutPrefix(target, "https://"); ok {
		target, opts.TLS = rest, true
	}
	target = strings.TrimPrefix(target, "http://")
	secure := opts.TLS || opts.RootCAs != nil || opts.CertPEM != nil
	dial := []grpc.DialOption{
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"pick_first": {}}]}`),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if secure {
		config := &tls.Config{MinVersion: tls.VersionTLS12}
		if opts.RootCAs != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(opts.RootCAs) {
				return nil, errors.New("leasehold: no PEM certificate in RootCAs")
			}
			config.RootCAs = pool
		}
		if opts.CertPEM != nil {
			pair, err := tls.X509KeyPair(opts.CertPEM, opts.KeyPEM)
			if err != nil {
				return nil, err
			}
			config.Certificates = []tls.Certificate{pair}
		}
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(config)))
	} else {
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if opts.Token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: opts.Token, secure: secure}))
	}
	if strings.Contains(target, ",") {
		list, err := newAddressList(target)
		if err != nil {
			return nil, err
		}
		dial = append(dial, grpc.WithResolvers(list))
		target = addressListScheme + ":///" + strings.Join(list.addresses, ",")
	}
	return grpc.NewClient(target, dial...)
}

// addressListScheme names the resolver of a comma-separated list of addresses. It is given to
// each connection with grpc.WithResolvers, never registered globally.
const addressListScheme = "leasehold-addresses"

// addressList is a resolver.Builder (and its resolver) whose state is a fixed list of
// addresses, one endpoint each, in the order given, for pick_first to try in turn.
type addressList struct {
	addresses []string
}

func newAddressList(target string) (*addressList, error) {
	list := &addressList{}
	for _, address := range strings.Split(target, ",") {
		address = strings.TrimSpace(address)
		address = strings.TrimPrefix(strings.TrimPrefix(address, "http://"), "https://")
		if address == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(address); err != nil {
			return nil, errors.New("leasehold: " + address + " in the address list is not host:port")
		}
		list.addresses = append(list.addresses, address)
	}
	if len(list.addresses) == 0 {
		return nil, errors.New("leasehold: an empty address list")
	}
	return list, nil
}

func (l *addressList) Scheme() string { return addressListScheme }

func (l *addressList) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	var endpoints []resolver.Endpoint
	for _, address := range l.addresses {
		host, _, _ := net.SplitHostPort(address)
		// ServerName: each address is its own authority (TLS verification, :authority).
		endpoints = append(endpoints, resolver.Endpoint{
			Addresses: []resolver.Address{{Addr: address, ServerName: host}},
		})
	}
	// An error here is the balancer's to report (the channel then fails its calls).
	_ = cc.UpdateState(resolver.State{Endpoints: endpoints})
	return l, nil
}

// ResolveNow has nothing to do: the list is fixed (a name in it is resolved on every dial).
func (l *addressList) ResolveNow(resolver.ResolveNowOptions) {}

func (l *addressList) Close() {}

// bearer adds the token to every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity lets a token go over plaintext only when TLS is off by choice
// (a loopback or a mesh that encrypts for us).
func (b bearer) RequireTransportSecurity() bool { return b.secure }
