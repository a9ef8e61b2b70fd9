package loadtest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// What a process costs, read from Linux's /proc. Elsewhere these fail, and
// the figures that need them are left out.

// userHZ is the unit of the CPU times in /proc/PID/stat: fixed at 100 by
// the kernel's ABI, whatever the kernel's own tick rate.
const userHZ = 100

// processCPU is the user plus system CPU time process pid has used so far,
// to 10ms.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, may hold spaces: count from the ')' that ends it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, errors.New("loadtest: unexpected /proc stat format")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// resetPeakRSS starts a new peak for peakRSS.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// peakRSS is process pid's peak resident memory in bytes since it started
// or since resetPeakRSS (VmHWM).
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("loadtest: no VmHWM in /proc status")
}
