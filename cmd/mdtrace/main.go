// Command mdtrace brings Android's malloc debug to Linux: it traces the
// allocations of a process with eBPF uprobes and writes Android's leak
// reports and native heap dumps.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/session"
	"github.com/mdtrace/mdtrace/tracer"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	os.Exit(mainStatus(os.Args[1:], os.Stdout, os.Stderr))
}

// mainStatus runs mdtrace and returns its exit status: the traced
// command's status in launch mode, 1 for a failure, 2 for bad usage.
func mainStatus(args []string, stdout, stderr io.Writer) int {
	if run, rest := subcommand(args); run != nil {
		return run(rest, stdout, stderr)
	}
	flags, err := options.ParseFlags(args, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		fmt.Fprintln(stderr, "Run 'mdtrace --help' for usage.")
		return 2
	}
	if flags.Help {
		return 0
	}
	if flags.Version {
		fmt.Fprintf(stdout, "mdtrace %s\n", version)
		return 0
	}
	if flags.Check {
		return runCheck(stdout, stderr)
	}
	if flags.PrintSuppressions {
		if err := printSuppressions(flags, stdout); err != nil {
			fmt.Fprintf(stderr, "mdtrace: %v\n", err)
			return 2
		}
		return 0
	}
	if flags.All {
		status, err := session.RunAll(flags, stdout, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		}
		return status
	}
	cfg, err := options.ConfigOf(flags)
	if err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		var cerr *options.ConfigError
		if errors.As(err, &cerr) {
			for _, l := range options.UsageLines {
				fmt.Fprintf(stderr, "mdtrace: %s\n", l)
			}
		}
		return 2
	}
	status, err := session.Run(flags, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		var lerr *tracer.LaunchError
		if errors.As(err, &lerr) {
			return lerr.Code
		}
		return 1
	}
	return status
}
