//go:build mutation

package crashtest

import "time"

// The run each mutant of scripts/mutate.sh gets: every crash test, briefly.
const (
	killsPerPoint = 10
	webhookKills  = 3 // SIGKILLs at each webhook crash point, each followed by a redelivery
	randomKills   = 2
	busyFor       = 3 * time.Second
)
