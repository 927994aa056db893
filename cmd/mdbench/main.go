//go:build linux

// Command mdbench runs a command under empty uprobes, the floor that
// `make bench` measures mdtrace against: an entry and a return probe on
// malloc and an entry probe on free, attached as mdtrace attaches its own
// (uprobe_multi links scoped to the process where the kernel has them),
// with programs that do nothing.
//
//	mdbench -- COMMAND [ARGS]
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/tracer"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: mdbench -- COMMAND [ARGS]")
		os.Exit(2)
	}
	code, err := run(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mdbench: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(argv []string) (int, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return 1, err
	}
	spec, err := bpf.LoadEmpty()
	if err != nil {
		return 1, err
	}
	multi := features.HaveBPFLinkUprobeMulti() == nil
	if multi {
		spec.Programs["empty_probe"].AttachType = ebpf.AttachTraceUprobeMulti
	}
	var objs bpf.EmptyObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return 1, err
	}
	defer objs.Close()
	var links []link.Link
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	proc, err := tracer.Launch(argv, nil, nil, tracer.Hooks{
		Ready: func(pid int) error {
			lib, err := tracer.AllocatorOfExec(pid)
			if err != nil {
				return err
			}
			malloc, err := tracer.FuncOffset(lib, "malloc")
			if err != nil {
				return err
			}
			free, err := tracer.FuncOffset(lib, "free")
			if err != nil {
				return err
			}
			ex, err := link.OpenExecutable(lib)
			if err != nil {
				return err
			}
			add := func(l link.Link, err error) error {
				if err == nil {
					links = append(links, l)
				}
				return err
			}
			if multi {
				return errors.Join(
					add(ex.UprobeMulti(nil, objs.EmptyProbe, &link.UprobeMultiOptions{Addresses: []uint64{malloc, free}, PID: uint32(pid)})),
					add(ex.UretprobeMulti(nil, objs.EmptyProbe, &link.UprobeMultiOptions{Addresses: []uint64{malloc}, PID: uint32(pid)})))
			}
			return errors.Join(
				add(ex.Uprobe("malloc", objs.EmptyProbe, &link.UprobeOptions{Address: malloc, PID: pid})),
				add(ex.Uretprobe("malloc", objs.EmptyProbe, &link.UprobeOptions{Address: malloc, PID: pid})),
				add(ex.Uprobe("free", objs.EmptyProbe, &link.UprobeOptions{Address: free, PID: pid})))
		},
	})
	if err != nil {
		return 1, err
	}
	st, err := proc.Wait()
	if err != nil {
		return 1, err
	}
	return st.Code, nil
}
