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
	point = os.Getenv("ONCEPAY_CRASH_POINT")
	prob  = probability()
)

func probability() float64 {
	v, ok := os.LookupEnv("ONCEPAY_CRASH_PROB")
	if !ok {
		return 1
	}
	p, err := strconv.ParseFloat(v, 64)
	if err != nil {
		panic("ONCEPAY_CRASH_PROB=" + v + ": want a number from 0 to 1")
	}
	return p
}

// Hit kills the process with SIGKILL if name is the configured point: no
// deferred function, no flush, no goodbye, as a power cut or the OOM killer.
func Hit(name string) {
	if name != point || rand.Float64() >= prob {
		return
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
