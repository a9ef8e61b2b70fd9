package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// A merchant's offline max age may not outlast the provider's memory of
// keys: merchant offline refuses it against --provider-window, and serve
// refuses to start when the provider it is given forgets sooner (the
// simulated provider's --sim-key-window), naming both figures.
func TestOfflineMaxAgeWithinTheProviderWindow(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "o.db")
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append(args, "--db", dbPath), env(nil), &out, io.Discard)
		return out.String(), err
	}
	out, err := cli("merchant", "create", "Kiosk")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	merchant := lines[len(lines)-1]
	if _, err := cli("merchant", "offline", merchant, "--max-amount", "100", "--max-total", "100", "--max-age", "2h", "--provider-window", "1h"); err == nil ||
		!strings.Contains(err.Error(), "2h0m0s") || !strings.Contains(err.Error(), "1h0m0s") {
		t.Errorf("merchant offline past --provider-window = %v, want a refusal naming 2h and 1h", err)
	}
	if _, err := cli("merchant", "offline", merchant, "--max-amount", "100", "--max-total", "100", "--max-age", "2h"); err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), []string{"serve", "--db", dbPath, "--addr", "127.0.0.1:0", "--sim-key-window", "1h"}, env(nil), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), merchant) || !strings.Contains(err.Error(), "2h0m0s") || !strings.Contains(err.Error(), "1h0m0s") {
		t.Errorf("serve with a sim that forgets keys after 1h = %v, want a refusal naming the merchant, 2h and 1h", err)
	}
}
