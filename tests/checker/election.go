package main

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// election is the leadership as clients believe in it.
type election struct {
	leader  grant // the leader and its term, when elected
	elected bool
	highest uint64 // the highest term there has been
}

// electionModel checks that there is at most one leader at a time, and that each new
// leader's term is above every earlier one's: a campaign that succeeded makes the client
// leader, a resignation (or a lost leadership) ends it.
var electionModel = porcupine.Model{
	Init: func() any { return election{} },
	Step: func(state, input, _ any) (bool, any) {
		e, c := state.(election), input.(change)
		g := grant{Client: c.Client, Token: c.Token}
		if c.Kind == Campaign {
			if e.elected || c.Token <= e.highest {
				return false, e
			}
			return true, election{leader: g, elected: true, highest: c.Token}
		}
		if !e.elected || e.leader != g {
			return false, e // ended a leadership it did not have
		}
		return true, election{highest: e.highest}
	},
	DescribeOperation: func(input, _ any) string {
		c := input.(change)
		if c.Kind == Campaign {
			return fmt.Sprintf("w%d elected, term %d", c.Client, c.Token)
		}
		return fmt.Sprintf("w%d resigns term %d", c.Client, c.Token)
	},
	DescribeState: func(state any) string {
		e := state.(election)
		if !e.elected {
			return fmt.Sprintf("no leader (highest term %d)", e.highest)
		}
		return fmt.Sprintf("leader w%d, term %d", e.leader.Client, e.leader.Token)
	},
}
