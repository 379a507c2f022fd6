package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyTestdata copies a history from testdata/ into a fresh directory, where the checker
// writes its visualisations by default.
func copyTestdata(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func runChecker(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	t.Logf("exit %d\n%s%s", code, stdout.String(), stderr.String())
	return code, stdout.String() + stderr.String()
}

func TestLegalHistoryPasses(t *testing.T) {
	path := copyTestdata(t, "legal.json")
	code, out := runChecker(t, path)
	if code != exitPassed {
		t.Fatalf("exit %d, want %d", code, exitPassed)
	}
	for _, want := range []string{
		"testdata/legal register: linearizable (6 ops)",
		"testdata/legal mutex: linearizable (4 ops)",
		"testdata/legal overlap: none beyond 1 holder",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if html, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.html")); len(html) != 0 {
		t.Errorf("visualisations written for a legal history: %v", html)
	}
}

func TestIllegalHistoryFailsAndIsVisualised(t *testing.T) {
	path := copyTestdata(t, "illegal.json")
	code, out := runChecker(t, "-timeout", "10s", path)
	if code != exitFailed {
		t.Fatalf("exit %d, want %d", code, exitFailed)
	}
	html := filepath.Join(filepath.Dir(path), "register.html")
	if !strings.Contains(out, "testdata/illegal register: NOT linearizable (6 ops); visualisation: "+html) {
		t.Errorf("output does not report the register and its visualisation")
	}
	data, err := os.ReadFile(html)
	if err != nil {
		t.Fatalf("visualisation not written: %v", err)
	}
	if !bytes.Contains(data, []byte("write t1 = 9 ok")) {
		t.Errorf("visualisation does not describe the stale write")
	}
}

func TestOutDirectory(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, _ := runChecker(t, "-out", out, filepath.Join("testdata", "illegal.json"))
	if code != exitFailed {
		t.Fatalf("exit %d, want %d", code, exitFailed)
	}
	if _, err := os.Stat(filepath.Join(out, "register.html")); err != nil {
		t.Error(err)
	}
	// With several histories, each run's visualisations get a folder of their own.
	code, _ = runChecker(t, "-out", out, filepath.Join("testdata", "legal.json"), filepath.Join("testdata", "illegal.json"))
	if code != exitFailed {
		t.Fatalf("exit %d, want %d", code, exitFailed)
	}
	if _, err := os.Stat(filepath.Join(out, "testdata_illegal", "register.html")); err != nil {
		t.Error(err)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	badKind := filepath.Join(dir, "kind.json")
	if err := os.WriteFile(badKind, []byte(`{"lock_limit": 1, "operations": [{"kind": "steal", "outcome": "ok", "return": 1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	badJSON := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badJSON, []byte(`{"operations": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"no history":     nil,
		"missing file":   {filepath.Join(dir, "absent.json")},
		"bad JSON":       {badJSON},
		"unknown kind":   {badKind},
		"bad flag":       {"-timeout", "soon", filepath.Join("testdata", "legal.json")},
		"bad among good": {"-out", dir, filepath.Join("testdata", "illegal.json"), badKind},
	} {
		t.Run(name, func(t *testing.T) {
			if code, _ := runChecker(t, args...); code != exitBadInput {
				t.Errorf("exit %d, want %d", code, exitBadInput)
			}
		})
	}
}

func TestFileName(t *testing.T) {
	for run, want := range map[string]string{
		"chaos/redis-restarted-empty": "chaos_redis-restarted-empty",
		"..":                          "run..",
		"a b":                         "a_b",
	} {
		if got := fileName(run); got != want {
			t.Errorf("fileName(%q) = %q, want %q", run, got, want)
		}
	}
}
