//go:build !crashpoints

// Package crashpoint marks the places where a crash hurts most. In a normal
// build Hit does nothing and compiles away; built with -tags crashpoints (for
// the crash tests only) it kills the process with SIGKILL at the point named
// by ONCEPAY_CRASH_POINT.
package crashpoint

// Hit marks the crash point name.
func Hit(name string) {}
