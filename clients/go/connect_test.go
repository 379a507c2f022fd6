package leasehold

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
