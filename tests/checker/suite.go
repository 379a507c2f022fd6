package main

import (
	"time"
)

// checkAll runs every check that applies to h, in a fixed order, writing the
// visualisations of models not proven linearizable to dir.
//
// Fencing (register, tokens, terms) must hold whatever the fault: it is what keeps a
// superseded holder from doing harm. The lock and the election may be broken by a fault
// that makes Redis lose data, so with data_loss their models' failures are reported as
// permitted; the interval checks still bound how long two may believe at once (one renewal
// period plus a slack: see History.permittedOverlap), and fail beyond it.
func checkAll(h *History, timeout time.Duration, dir string) []result {
	exclusive := !h.DataLoss
	models := []modelCheck{
		{name: "register", model: registerModel, ops: registerOps(h), mustPass: true},
		tokensCheck(h),
	}
	if campaigns := grantOps(h, Campaign); len(campaigns) > 0 {
		models = append(models, modelCheck{name: "terms", model: termsModel, ops: campaigns, mustPass: true})
	}
	models = append(models,
		lockCheck(h, exclusive),
		modelCheck{name: "election", model: electionModel, ops: changeOps(h, Campaign, Resign), mustPass: exclusive},
	)
	var results []result
	for _, m := range models {
		results = append(results, m.run(h.Run, timeout, dir))
	}
	return append(results, lockOverlap(h), leading.check(h, 1))
}
