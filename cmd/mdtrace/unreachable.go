//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/mdtrace/mdtrace/ctl"
)

const unreachableUsage = `usage: mdtrace unreachable [--contents] [-o FILE] -p PID
Asks the mdtrace that traces process PID to check it for unreachable memory now, as libmemunreachable does
(dumpsys meminfo --unreachable), and prints the report: the live blocks that nothing in the process points to
any more, folded by what holds them and merged by backtrace. The check marks the live table that mdtrace keeps
of the process, so an mdtrace must trace it already (mdtrace -p PID, or the program launched under mdtrace).
`

// unreachableTimeout bounds the wait for a check: the process is stopped
// for a few milliseconds, but marking a heap of gigabytes takes seconds.
const unreachableTimeout = 5 * time.Minute

func runUnreachable(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("unreachable", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	help := fs.BoolP("help", "h", false, "show this help")
	pid := fs.IntP("pid", "p", 0, "check the process `PID`")
	contents := fs.Bool("contents", false, "show the first 32 bytes of each leak, in hex and ASCII (libmemunreachable's log_contents)")
	out := fs.StringP("output", "o", "", "write the report to `FILE` (0600) instead of standard output")
	if status, done := parseSubcommand(fs, help, args, unreachableUsage, stdout, stderr); done {
		return status
	}
	if *pid == 0 && fs.NArg() == 1 {
		n, err := strconv.Atoi(fs.Arg(0))
		if err != nil {
			return usageError(stderr, fmt.Errorf("%q is not a process ID", fs.Arg(0)), unreachableUsage)
		}
		*pid = n
	} else if fs.NArg() > 0 {
		return usageError(stderr, errors.New("unreachable checks one process: -p PID"), unreachableUsage)
	}
	if *pid <= 0 {
		return usageError(stderr, errors.New("which process? -p PID"), unreachableUsage)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", *pid)); err != nil {
		fmt.Fprintf(stderr, "mdtrace: process %d does not exist\n", *pid)
		return 1
	}
	text, err := ctl.AskUnreachable(*pid, *contents, unreachableTimeout)
	if errors.Is(err, ctl.ErrNotTraced) {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		fmt.Fprintf(stderr, "mdtrace: the check marks the live blocks that the mdtrace tracing a process keeps from when it started; "+
			"start one first (sudo mdtrace -p %d sees the blocks allocated from then on; a program launched under mdtrace, all of them)\n", *pid)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	if err := writeOutput(*out, stdout, func(w io.Writer) error { _, err := w.Write(text); return err }); err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	return 0
}
