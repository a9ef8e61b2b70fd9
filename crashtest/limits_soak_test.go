//go:build soak

package crashtest

import "time"

// The soak run: go test -tags soak -timeout 60m ./crashtest/
const (
	killsPerPoint = 500
	webhookKills  = 200 // SIGKILLs at each webhook crash point, each followed by a redelivery
	refundKills   = 200 // SIGKILLs at each of the four crash points a refund passes
	randomKills   = 60
	busyFor       = 10 * time.Minute
)
