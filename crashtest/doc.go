// Package crashtest proves oncepay's guarantees with real processes: it
// builds the binary with -tags crashpoints, runs it and the simulated provider
// as children, kills them with SIGKILL, fills their disk, and then checks the
// provider's ledger against oncepay's database and every client's answer.
// It also runs the release builds of scripts/release.sh, the ARM ones under
// qemu-user (edge_test.go).
// It holds tests only; crash_test.go says how the crash points are hooked.
package crashtest
