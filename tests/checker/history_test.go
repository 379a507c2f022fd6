package main

import (
	"strings"
	"testing"
)

func TestParseHistory(t *testing.T) {
	cases := []struct {
		name, json, err string
	}{
		{"valid", `{"run": "r", "lock_limit": 2, "data_loss": true, "renewal_ms": 167, "operations": [
			{"client": 0, "kind": "acquire", "call": 1, "return": 2, "outcome": "ok", "token": 1},
			{"client": 0, "kind": "write", "call": 3, "return": null, "outcome": "unknown", "token": 1, "value": 4},
			{"client": 0, "kind": "lost", "call": 5, "outcome": "ok", "token": 1}]}`, ""},
		{"data loss without its bound", `{"lock_limit": 1, "data_loss": true, "operations": []}`, "renewal_ms 0"},
		{"negative renewal", `{"lock_limit": 1, "renewal_ms": -1, "operations": []}`, "renewal_ms -1"},
		{"bad JSON", `{"run": `, "bad JSON"},
		{"trailing data", `{"lock_limit": 1} {}`, "data after"},
		{"no lock limit", `{"run": "r", "operations": []}`, "lock_limit"},
		{"unknown kind", `{"lock_limit": 1, "operations": [{"kind": "steal", "outcome": "ok", "return": 1}]}`, `unknown kind "steal"`},
		{"unknown outcome", `{"lock_limit": 1, "operations": [{"kind": "read", "outcome": "maybe", "return": 1}]}`, `unknown outcome "maybe"`},
		{"ok without a return", `{"lock_limit": 1, "operations": [{"kind": "read", "outcome": "ok"}]}`, "no return time"},
		{"returned before called", `{"lock_limit": 1, "operations": [{"kind": "read", "outcome": "ok", "call": 5, "return": 4}]}`, "before it was called"},
		{"negative client", `{"lock_limit": 1, "operations": [{"client": -1, "kind": "read", "outcome": "ok", "return": 4}]}`, "negative client"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseHistory([]byte(c.json))
			switch {
			case c.err == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Errorf("error %v, want one saying %q", err, c.err)
			}
		})
	}
}

func TestUnknownOutcomesNeverReturn(t *testing.T) {
	ret := int64(10)
	if got := (Op{Outcome: Unknown, Return: &ret}).returned(); got != never {
		t.Errorf("an unknown outcome that errored at 10 returns at %d, want never", got)
	}
	if got := (Op{Kind: Lost, Call: 7}).ended(); got != 7 {
		t.Errorf("an end with no return ends at %d, want its call", got)
	}
}
