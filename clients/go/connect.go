package leasehold

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
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

// Dial opens a connection to a Leasehold server for Acquire, Campaign and the other calls.
func Dial(target string, opts DialOptions) (*grpc.ClientConn, error) {
	secure := opts.TLS || opts.RootCAs != nil || opts.CertPEM != nil
	var dial []grpc.DialOption
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
	return grpc.NewClient(target, dial...)
}

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
