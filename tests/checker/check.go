package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
)

// status is how one check went, ordered from best to worst.
type status int

const (
	passed status = iota
	// permitted: the check failed, but the run's fault (data loss) allows that failure.
	permitted
	failed
)

// result is one check's verdict: the line to print and whether it lets the run pass.
type result struct {
	line   string
	status status
}

// modelCheck is one Porcupine model over the operations of a history it applies to.
type modelCheck struct {
	name  string
	model porcupine.Model
	ops   []porcupine.Operation
	// mustPass is false when the run's fault may make Redis lose data, so that the model
	// failing is reported as permitted rather than failing the run.
	mustPass bool
}

// run checks the model, and when the history is not proven linearizable (illegal, or the
// check timed out) writes the visualisation to <dir>/<name>.html so the failure can be read.
func (c modelCheck) run(run string, timeout time.Duration, dir string) result {
	prefix := fmt.Sprintf("%s %s: ", run, c.name)
	if len(c.ops) == 0 {
		return result{line: prefix + "no ops", status: passed}
	}
	verdict, info := porcupine.CheckOperationsVerbose(c.model, c.ops, timeout)
	if verdict == porcupine.Ok {
		return result{line: fmt.Sprintf("%slinearizable (%d ops)", prefix, len(c.ops)), status: passed}
	}
	line := fmt.Sprintf("%sNOT linearizable (%d ops)", prefix, len(c.ops))
	if verdict == porcupine.Unknown {
		line = fmt.Sprintf("%snot proven: timed out after %s (%d ops)", prefix, timeout, len(c.ops))
	}
	st := failed
	if !c.mustPass {
		st = permitted
		line += ", permitted by the fault (data loss)"
	}
	path := filepath.Join(dir, c.name+".html")
	if err := porcupine.VisualizePath(c.model, info, path); err != nil {
		line += fmt.Sprintf("; visualisation not written: %v", err)
	} else {
		line += "; visualisation: " + path
	}
	return result{line: line, status: st}
}
