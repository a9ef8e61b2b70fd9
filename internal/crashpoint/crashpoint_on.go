//go:build crashpoints

package crashpoint

import (
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
)

// ONCEPAY_CRASH_POINT names the point; ONCEPAY_CRASH_PROB (default 1) is the
// chance that one pass through it kills the process.
var (
	point   = os.Getenv("ONCEPAY_CRASH_POINT")
	prob, _ = strconv.ParseFloat(os.Getenv("ONCEPAY_CRASH_PROB"), 64)
)

// Hit kills the process with SIGKILL if name is the configured point: no
// deferred function, no flush, no goodbye, as a power cut or the OOM killer.
func Hit(name string) {
	if name != point || (prob > 0 && rand.Float64() >= prob) {
		return
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
