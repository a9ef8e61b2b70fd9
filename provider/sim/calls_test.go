package sim

import (
	"strconv"
	"testing"
)

// The call log holds the last MaxCallKeys keys first called, whatever the
// number of calls: older keys are forgotten, a key called again keeps one
// entry and its counts.
func TestCallLogIsBounded(t *testing.T) {
	var l callLog
	const extra = 10
	for i := range MaxCallKeys + extra {
		l.add("k"+strconv.Itoa(i), opCharge)
		l.add("k"+strconv.Itoa(i), opLookup)
	}
	if len(l.byKey) != MaxCallKeys {
		t.Fatalf("%d keys held, want %d", len(l.byKey), MaxCallKeys)
	}
	for i := range extra {
		if _, ok := l.byKey["k"+strconv.Itoa(i)]; ok {
			t.Errorf("k%d, among the oldest, is still held", i)
		}
	}
	last := l.byKey["k"+strconv.Itoa(MaxCallKeys+extra-1)]
	if last == nil || last.Charges != 1 || last.Lookups != 1 {
		t.Errorf("the newest key's calls = %+v, want 1 charge, 1 lookup", last)
	}
}
