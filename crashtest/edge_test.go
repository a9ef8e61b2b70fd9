package crashtest

import (
	"bufio"
	"debug/elf"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// edgeBuild is one binary scripts/release.sh makes, and the qemu-user
// emulator that runs it on another architecture.
type edgeBuild struct {
	name     string // its file in dist/
	goarch   string
	machine  elf.Machine
	emulator string
}

var edgeBuilds = []edgeBuild{
	{"oncepay-linux-amd64", "amd64", elf.EM_X86_64, "qemu-x86_64-static"},
	{"oncepay-linux-arm64", "arm64", elf.EM_AARCH64, "qemu-aarch64-static"},
	{"oncepay-linux-arm-v7", "arm", elf.EM_ARM, "qemu-arm-static"},
}

// TestEdgeBuilds builds the release binaries with scripts/release.sh, checks
// each is a static ELF of its architecture, and runs its demo on a loopback
// port: natively on this machine's architecture, under qemu-user elsewhere
// (the emulator called by name, so binfmt need not be registered). Each
// takes a payment, replays it byte for byte, and stops cleanly on SIGTERM.
// It logs each binary's size and the demo's idle RSS (docs/edge.md).
func TestEdgeBuilds(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the release builds are for Linux")
	}
	begin := time.Now()
	dist := t.TempDir()
	release := exec.Command("bash", "../scripts/release.sh")
	release.Env = append(cleanEnv(), "DIST="+dist, "VERSION=v0.0.0-edgetest")
	if out, err := release.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh: %v\n%s", err, out)
	}
	t.Logf("scripts/release.sh: %v", time.Since(begin).Round(100*time.Millisecond))
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range edgeBuilds {
		t.Run(b.goarch, func(t *testing.T) {
			bin := filepath.Join(dist, b.name)
			if !strings.Contains(string(sums), "  "+b.name+"\n") {
				t.Errorf("SHA256SUMS has no line for %s:\n%s", b.name, sums)
			}
			checkStatic(t, bin, b.machine)
			prog := []string{bin}
			if b.goarch != runtime.GOARCH {
				emu, err := exec.LookPath(b.emulator)
				if err != nil {
					if os.Getenv("CI") == "true" {
						t.Fatalf("%s not found: scripts/test.sh installs qemu-user-static", b.emulator)
					}
					t.Skipf("%s not found (apt-get install qemu-user-static): %s is not run", b.emulator, b.name)
				}
				prog = []string{emu, bin}
			}
			smokeDemo(t, prog, b.name)
		})
	}
	t.Logf("in all: %v", time.Since(begin).Round(100*time.Millisecond))
}

// checkStatic fails unless bin is an ELF executable for machine with no
// program interpreter and no shared library: it runs with nothing
// installed, on any Linux of its architecture.
func checkStatic(t *testing.T, bin string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("%s: %v %v, want %v ET_EXEC", bin, f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter (PT_INTERP): it is dynamically linked, want static", bin)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v (%v), want none", bin, libs, err)
	}
}

// smokeDemo runs prog's demo, pays once with an Idempotency-Key and again
// with the same, wants the second answer to be the first byte for byte with
// Idempotent-Replayed: true, and stops it with SIGTERM.
func smokeDemo(t *testing.T, prog []string, name string) {
	info, err := os.Stat(prog[len(prog)-1])
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	// An emulated demo opens its database and applies the schema some
	// ten times slower than a native one, on a machine that may be busy.
	srv := startProgram(t, prog, 2*time.Minute, nil, "demo", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "demo.db"))
	started := time.Since(begin)
	time.Sleep(time.Second) // idle: what it holds after its start, before any request
	rss := vmRSS(t, srv.cmd.Process.Pid)

	c := newClient()
	in := newIntent("edge-"+name, 1999, "tok_visa")
	first := mustPay(t, c, srv.url, merchant{}, in)
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("payment = %v (Idempotent-Replayed %q), want 201, not a replay", first, first.header.Get("Idempotent-Replayed"))
	}
	again := mustPay(t, c, srv.url, merchant{}, in)
	if !again.same(first) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the same payment again = %v (Idempotent-Replayed %q), want %v byte for byte, replayed", again, again.header.Get("Idempotent-Replayed"), first)
	}
	c.CloseIdleConnections()

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	srv.exit(t, time.Minute)
	if srv.err != nil {
		t.Errorf("demo after SIGTERM: %v, want a clean exit\n%s", srv.err, srv.logs)
	}
	how := "native"
	if len(prog) > 1 {
		how = "under " + filepath.Base(prog[0]) + ", its RSS included"
	}
	t.Logf("%s: %d bytes; demo listening after %v, idle RSS %d kB (%s); in all %v",
		name, info.Size(), started.Round(10*time.Millisecond), rss, how, time.Since(begin).Round(10*time.Millisecond))
}

// vmRSS is the resident set of process pid, in kB, from /proc/PID/status.
func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			var kb int
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
