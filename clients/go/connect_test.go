package leasehold

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestATokenOpensItsPrefixesAndNothingElse(t *testing.T) {
	digest := sha256.Sum256([]byte("go-secret"))
	grants := filepath.Join(t.TempDir(), "auth.toml")
	text := "[[grant]]\nname = \"go\"\ntoken_sha256 = \"" + hex.EncodeToString(digest[:]) +
		"\"\nrole = \"hold\"\nlocks = [\"go/\"]\n"
	if err := os.WriteFile(grants, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := launch(t, "--auth-file", grants)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	conn, err := Dial(addr, DialOptions{Token: "go-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lease, err := Acquire(ctx, conn, "go/job", Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(ctx, conn, "other/job", Options{TTL: 5 * time.Second}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("outside the prefix: %v", err)
	}
	if held, err := lease.Release(); err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}

	anonymous, err := Dial(addr, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer anonymous.Close()
	if _, err := Acquire(ctx, anonymous, "go/job", Options{TTL: 5 * time.Second}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a token: %v", err)
	}
}

// testCA makes a CA and a server certificate for 127.0.0.1 signed by it, as PEM.
func testCA(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "go test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	server := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, server, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func TestTLSWithTheServerCA(t *testing.T) {
	caPEM, certPEM, keyPEM := testCA(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := launch(t, "--tls-cert", cert, "--tls-key", key)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	conn, err := Dial(addr, DialOptions{RootCAs: caPEM})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lease, err := Acquire(ctx, conn, "tls/job", Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if held, err := lease.Release(); err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}

	plain, err := Dial(addr, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := Acquire(ctx, plain, "tls/job", Options{TTL: 5 * time.Second}); err == nil {
		t.Fatal("plaintext was served on a TLS listener")
	}
}

// A comma-separated list: a dead address is skipped, and each address keeps its own name for
// TLS; the bearer token goes along.
func TestAnAddressListKeepsTLSAndTheToken(t *testing.T) {
	caPEM, certPEM, keyPEM := testCA(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	digest := sha256.Sum256([]byte("go-secret"))
	grants := filepath.Join(dir, "auth.toml")
	for path, text := range map[string][]byte{
		cert: certPEM, key: keyPEM,
		grants: []byte("[[grant]]\nname = \"go\"\ntoken_sha256 = \"" + hex.EncodeToString(digest[:]) +
			"\"\nrole = \"hold\"\nlocks = [\"go/\"]\n"),
	} {
		if err := os.WriteFile(path, text, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr, _, _ := launch(t, "--tls-cert", cert, "--tls-key", key, "--auth-file", grants)
	dead := "127.0.0.1:" + strconv.Itoa(freePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	conn, err := Dial(dead+", "+addr, DialOptions{RootCAs: caPEM, Token: "go-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lease, err := Acquire(ctx, conn, "go/job", Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if held, err := lease.Release(); err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}
	if _, err := Dial(" , ", DialOptions{}); err == nil {
		t.Fatal("an empty list was accepted")
	}
}

// dnsServer answers every A query with addrs, and any other query with no record, on a UDP
// port of the loopback: its address.
func dnsServer(t *testing.T, addrs ...[4]byte) string {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		packet := make([]byte, 512)
		for {
			n, from, err := conn.ReadFrom(packet)
			if err != nil {
				return
			}
			var query dnsmessage.Parser
			header, err := query.Start(packet[:n])
			if err != nil {
				continue
			}
			question, err := query.Question()
			if err != nil {
				continue
			}
			answer := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: header.ID, Response: true,
				Authoritative: true, RecursionDesired: header.RecursionDesired})
			answer.StartQuestions()
			answer.Question(question)
			answer.StartAnswers()
			if question.Type == dnsmessage.TypeA {
				for _, addr := range addrs {
					answer.AResource(dnsmessage.ResourceHeader{Name: question.Name,
						Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: addr})
				}
			}
			if reply, err := answer.Finish(); err == nil {
				conn.WriteTo(reply, from)
			}
		}
	}()
	return conn.LocalAddr().String()
}

// A DNS name with two addresses (for two servers on one port): the lease is taken on the
// second while the first is down, and resumed on the first when the second crashes.
func TestADNSNameWithSeveralAddresses(t *testing.T) {
	redisPort := startRedis(t)
	port := strconv.Itoa(freePort(t))
	_, second := startLeasehold(t, redisPort, "127.0.0.2:"+port)
	resolver := dnsServer(t, [4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2})
	conn := dial(t, "dns://"+resolver+"/leasehold.test:"+port)

	lease, err := Acquire(context.Background(), conn, "job", Options{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	startLeasehold(t, redisPort, "127.0.0.1:"+port)
	if err := second.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	second.Wait()
	confirmedAfter(t, lease, lease.ValidUntil())
	if got := lockToken(redisPort, lockKey); got != lease.Token {
		t.Fatalf("lock key holds %q", got)
	}
	if held, err := lease.Release(); err != nil || !held {
		t.Fatalf("release: %v %v", held, err)
	}
}
