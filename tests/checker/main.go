// Command checker checks the histories recorded by Leasehold's fault tests for
// linearizability with Porcupine: the fenced register, the growth of fencing tokens and
// election terms, the lock (a mutex or a semaphore) and the election, plus an interval
// check of how long clients believed they held at once.
//
// Usage:
//
//	checker [-timeout 60s] [-out DIR] history.json [more.json ...]
//
// It prints one line per check and writes the visualisation of each model not proven
// linearizable to DIR/<model>.html (DIR defaults to the history's directory). It exits 0
// when every check that must pass passed, 1 when one failed, and 2 on bad input.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Exit statuses.
const (
	exitPassed   = 0
	exitFailed   = 1
	exitBadInput = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command, apart from exiting, so tests can run it.
func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("checker", flag.ContinueOnError)
	flags.SetOutput(stderr)
	timeout := flags.Duration("timeout", 60*time.Second, "how long each Porcupine model may search (0: no limit); a model that times out is not proven and fails")
	out := flags.String("out", "", "where to write visualisations (default: each history's directory; with several histories, a folder per run inside it)")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: checker [-timeout 60s] [-out DIR] history.json [more.json ...]")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return exitBadInput
	}
	if flags.NArg() == 0 {
		flags.Usage()
		return exitBadInput
	}
	code := exitPassed
	for _, path := range flags.Args() {
		code = max(code, checkFile(path, *out, flags.NArg() > 1, *timeout, stdout, stderr))
	}
	return code
}

// checkFile checks one history and returns its exit status.
func checkFile(path, out string, several bool, timeout time.Duration, stdout, stderr io.Writer) int {
	h, err := readHistory(path)
	if err != nil {
		fmt.Fprintf(stderr, "checker: %s: %v\n", path, err)
		return exitBadInput
	}
	if h.Run == "" {
		h.Run = path
	}
	dir := filepath.Dir(path)
	if out != "" {
		dir = out
		if several {
			// Keep one history's visualisations from overwriting another's.
			dir = filepath.Join(out, fileName(h.Run))
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "checker: %v\n", err)
		return exitBadInput
	}
	code := exitPassed
	for _, r := range checkAll(h, timeout, dir) {
		fmt.Fprintln(stdout, r.line)
		if r.status == failed {
			code = exitFailed
		}
	}
	return code
}

// fileName turns a run's name (such as "chaos/redis-restarted-empty") into one folder name.
func fileName(run string) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, run)
	if strings.Trim(name, ".") == "" {
		return "run" + name
	}
	return name
}
