//go:build linux

package tracer

import (
	"bufio"
	"compress/gzip"
	"io"
	"os"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelPreempts reports whether the running kernel may preempt kernel
// code, and so a uprobe's BPF program: then the stack walk keeps preemption
// off while it uses its per-CPU scratch space (bpf/stack.h,
// take_stack). Where the answer cannot be found, it is yes.
func kernelPreempts() bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return true
	}
	sched, _ := os.ReadFile("/sys/kernel/debug/sched/preempt")
	cmdline, _ := os.ReadFile("/proc/cmdline")
	return preemptModel(unix.ByteSliceToString(u.Version[:]), string(sched), string(cmdline), kernelConfig(unix.ByteSliceToString(u.Release[:])))
}

// preemptModel decides kernelPreempts from the kernel's version string
// (uname -v: "PREEMPT_RT", "PREEMPT", "PREEMPT_DYNAMIC" or none of them),
// the scheduler's debugfs file (the mode in use in parentheses, as in
// "none voluntary (full) lazy"), the kernel command line (preempt=) and
// the kernel's build configuration (the default mode of a dynamic kernel).
// Empty strings are unknown.
func preemptModel(version, sched, cmdline, config string) bool {
	switch {
	case strings.Contains(version, "PREEMPT_RT"):
		return true
	case strings.Contains(version, "PREEMPT_DYNAMIC"):
		// The mode is chosen at boot, or changed later through debugfs.
	case strings.Contains(version, "PREEMPT"):
		return true
	default:
		// Built without preemption (none or voluntary).
		return false
	}
	if m := modeInUse.FindStringSubmatch(sched); m != nil {
		return preemptingMode(m[1])
	}
	for _, f := range strings.Fields(cmdline) {
		if mode, ok := strings.CutPrefix(f, "preempt="); ok {
			return preemptingMode(mode)
		}
	}
	for _, line := range strings.Split(config, "\n") {
		switch line {
		case "CONFIG_PREEMPT_NONE=y", "CONFIG_PREEMPT_VOLUNTARY=y":
			return false
		case "CONFIG_PREEMPT=y", "CONFIG_PREEMPT_LAZY=y", "CONFIG_PREEMPT_RT=y":
			return true
		}
	}
	return true
}

// modeInUse finds the mode in use in the scheduler's debugfs file.
var modeInUse = regexp.MustCompile(`\((\w+)\)`)

// preemptingMode reports whether a dynamic kernel's preemption mode lets
// kernel code be preempted; an unknown mode is taken to.
func preemptingMode(mode string) bool {
	return mode != "none" && mode != "voluntary"
}

// kernelConfig returns the preemption lines of the running kernel's build
// configuration, from /proc/config.gz or /boot/config-RELEASE, "" if
// neither can be read.
func kernelConfig(release string) string {
	var r io.Reader
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		if z, err := gzip.NewReader(f); err == nil {
			r = z
		}
	}
	if r == nil && release != "" && !strings.Contains(release, "/") {
		f, err := os.Open("/boot/config-" + release)
		if err != nil {
			return ""
		}
		defer f.Close()
		r = f
	}
	if r == nil {
		return ""
	}
	var b strings.Builder
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "CONFIG_PREEMPT") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
