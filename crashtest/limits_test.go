//go:build !soak && !mutation

package crashtest

import "time"

// The bounded run CI does; -tags soak (limits_soak_test.go) runs the long
// one, and -short a quick one.
const (
	killsPerPoint = 100              // SIGKILLs at each of the four crash points
	webhookKills  = 20               // SIGKILLs at each webhook crash point, each followed by a redelivery
	refundKills   = 25               // SIGKILLs at each of the four crash points a refund passes
	randomKills   = 6                // SIGKILLs at random moments under load, in one test
	busyFor       = 30 * time.Second // the busy-database run
)
