package main

import (
	"fmt"
	"io"
	"time"

	"github.com/mdtrace/mdtrace/session"
	"github.com/mdtrace/mdtrace/tracer"
)

// runCheck is mdtrace --check: what the running kernel has of what mdtrace
// uses, what mdtrace does where a feature is missing, and whether the
// kernel verifies the BPF programs as the main modes load them. Exit
// status 0 when mdtrace can run here, 1 when it cannot.
func runCheck(stdout, stderr io.Writer) int {
	if err := session.CheckPrivileges(); err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "kernel %s\n", tracer.KernelRelease())
	ok := true
	for _, f := range tracer.Features() {
		mark := "yes"
		if !f.Have {
			mark = "no "
		}
		fmt.Fprintf(stdout, "  %s  %s (Linux %s): %s\n", mark, f.Name, f.Since, f.For)
		switch {
		case f.Err != nil:
			fmt.Fprintf(stdout, "       could not tell: %v\n", f.Err)
		case f.Have:
			continue
		}
		if f.Required() {
			ok = false
			fmt.Fprintln(stdout, "       mdtrace cannot run without it")
		} else {
			fmt.Fprintf(stdout, "       without it: %s\n", f.Without)
		}
	}
	if !ok {
		fmt.Fprintln(stdout, "mdtrace cannot run on this kernel.")
		return 1
	}
	fmt.Fprintln(stdout, "BPF programs, as each mode loads them:")
	for _, v := range tracer.LoadVariants() {
		if !v.Check {
			continue
		}
		start := time.Now()
		p, err := tracer.LoadProbes(v.Config)
		if err != nil {
			ok = false
			fmt.Fprintf(stdout, "  FAIL  %s: %v\n", v.Name, err)
			continue
		}
		took := time.Since(start)
		where, err := p.DrainPoint()
		unguarded := p.Unguarded
		p.Close()
		if err != nil {
			ok = false
			fmt.Fprintf(stdout, "  FAIL  %s: %v\n", v.Name, err)
			continue
		}
		if unguarded {
			where += "; " + tracer.UnguardedNote
		}
		fmt.Fprintf(stdout, "  ok    %s (verified in %d ms; threads' last batches at %s)\n", v.Name, took.Milliseconds(), where)
	}
	if !ok {
		fmt.Fprintln(stdout, "mdtrace cannot run on this kernel in every mode.")
		return 1
	}
	fmt.Fprintln(stdout, "mdtrace can run on this kernel.")
	return 0
}
