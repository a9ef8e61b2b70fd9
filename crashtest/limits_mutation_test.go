//go:build mutation

package crashtest

import "time"

// The run each mutant of scripts/mutate.sh gets: every crash test, briefly.
const (
	killsPerPoint = 10
	webhookKills  = 3 // SIGKILLs at each webhook crash point, each followed by a redelivery
	refundKills   = 2 // SIGKILLs at each of the four crash points a refund passes
	randomKills   = 2
	busyFor       = 3 * time.Second
)
