package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// version is set at release builds with -ldflags "-X main.version=v1.2.3";
// otherwise the module version from the build info is shown.
var version = ""

// runVersion is "oncepay version": the version, the VCS revision the binary
// was built from, and the Go that built it.
func runVersion(stdout io.Writer) error {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("no build information in this binary")
	}
	v := version
	if v == "" {
		v = info.Main.Version
	}
	rev := ""
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = " " + s.Value[:12] + rev
		case s.Key == "vcs.modified" && s.Value == "true":
			rev += "+modified"
		}
	}
	_, err := fmt.Fprintf(stdout, "oncepay %s%s %s\n", v, rev, info.GoVersion)
	return err
}

// versionString is the version alone, as a User-Agent carries it.
func versionString() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "devel"
}
