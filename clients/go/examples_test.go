package leasehold

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The README's Go example (examples/hold) runs unchanged against a real server.
func TestReadmeExampleHoldsTheLockAndReleasesIt(t *testing.T) {
	conn, _ := start(t)
	run := exec.Command("go", "run", "./examples/hold")
	run.Env = append(os.Environ(), "LEASEHOLD_SERVER="+conn.Target())
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./examples/hold: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "holding nightly-report, fencing token ") ||
		lines[1] != "work done" || lines[2] != "released: true <nil>" {
		t.Fatalf("unexpected output:\n%s", out)
	}
}
