package ts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A client generated from the document by openapi-typescript, called with
// openapi-fetch, pays, retries, reads, refunds and branches on 402 and 409
// under tsc --strict with no cast; and Redocly's linter passes the document
// with the rules redocly.yaml sets. Skipped without Node.js and npm, except
// in CI, where it must run.
func TestGeneratedClientCompiles(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed, and CI must run this test", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	doc, err := filepath.Abs("../../web/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	modules := install(ctx, t)
	bin := func(name string) string { return filepath.Join(modules, ".bin", name) }

	work := t.TempDir()
	for _, f := range []string{"checkout.ts", "tsconfig.json"} {
		copyFile(t, f, filepath.Join(work, f))
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	run(ctx, t, work, bin("openapi-typescript"), doc, "--output", filepath.Join(work, "schema.d.ts"))
	run(ctx, t, work, bin("tsc"), "--strict", "--noEmit", "--project", filepath.Join(work, "tsconfig.json"))

	config, err := filepath.Abs("redocly.yaml")
	if err != nil {
		t.Fatal(err)
	}
	run(ctx, t, work, bin("redocly"), "lint", "--config", config, "--max-problems", "50", doc)
}

// install runs npm ci for package-lock.json once per lock file, into the
// user's cache directory (a temporary one if there is none), and returns
// its node_modules.
func install(ctx context.Context, t *testing.T) string {
	t.Helper()
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile("package.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(manifest, lock...))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = t.TempDir()
	}
	dir := filepath.Join(cache, "oncepay", "ts-"+hex.EncodeToString(sum[:8]))
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, ".package-lock.json")); err == nil {
		return modules
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// Installed aside, then renamed into place: a run stopped halfway
	// leaves no half-installed directory to be taken for a whole one.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		copyFile(t, f, filepath.Join(tmp, f))
	}
	run(ctx, t, tmp, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, fs.ErrExist) {
		if _, serr := os.Stat(filepath.Join(modules, ".package-lock.json")); serr != nil { // not another run's
			t.Fatal(err)
		}
	}
	return modules
}

// run runs name in dir and fails the test with its output if it fails.
func run(ctx context.Context, t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// No telemetry, no update check, no colour codes in a failure's text.
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1", "FORCE_COLOR=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, out.Bytes())
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
