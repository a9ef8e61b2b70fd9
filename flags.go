package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlagSet returns a flag set for the subcommand name whose usage lists
// each flag's ONCEPAY_* environment variable.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: oncepay %s\n\nFlags (each also read from its environment variable):\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			def := f.DefValue
			if def == "" {
				def = `""`
			}
			fmt.Fprintf(stderr, "  --%s (%s, default %s)\n      %s\n", f.Name, envName(f.Name), def, f.Usage)
		})
	}
	return fs
}

// parseFlags parses args over values from the environment: a flag on the
// command line wins over its ONCEPAY_* variable, which wins over the default.
// Flags may come before or after the positional arguments, which it returns.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) ([]string, error) {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && err == nil {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, serr)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// envName is the environment variable of flag name: --sim-latency is
// ONCEPAY_SIM_LATENCY.
func envName(name string) string {
	return "ONCEPAY_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}
