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
	"testing"
	"time"

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
