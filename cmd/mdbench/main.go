//go:build linux

// Command mdbench runs a command under empty uprobes, the floors that
// `make bench` measures mdtrace against, with programs that do nothing,
// attached as mdtrace attaches its own (uprobe_multi links scoped to the
// process where the kernel has them).
//
// By default the probes are an entry and a return probe on the program's
// malloc and an entry probe on its free, at the functions' first
// instructions. With --probe-points they go where mdtrace puts its own:
// free's past its null test, where the kernel emulates the instruction
// instead of single-stepping it. Either is a floor of mdtrace without its
// shim (--no-preload). With --sites, the shim is preloaded into the command
// (LD_PRELOAD, no options) and the probes are entry probes on its two probe
// sites, mdshim_site_alloc and mdshim_site_free: the floor of mdtrace with
// its shim. --batch adds its batch site, mdshim_site_batch, and has the
// shim batch as mdtrace has it (MDSHIM_BATCH=16): the floor of the batches,
// the shim's own work and one probe hit per batch.
//
//	mdbench [--probe-points | --sites SHIM [--batch]] -- COMMAND [ARGS]
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/tracer"
)

// siteSymbols are the shim's probe sites.
var siteSymbols = []string{"mdshim_site_alloc", "mdshim_site_free"}

func main() {
	fs := flag.NewFlagSet("mdbench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: mdbench [--probe-points | --sites SHIM [--batch]] -- COMMAND [ARGS]")
		fs.PrintDefaults()
	}
	sites := fs.String("sites", "", "preload the shim at `PATH` (libmdshim.so) and probe its two probe sites instead of malloc and free")
	points := fs.Bool("probe-points", false, "probe malloc and free where mdtrace probes them instead of at their first instructions")
	batch := fs.Bool("batch", false, "with --sites, have the shim batch its calls and probe its batch site too")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	args := fs.Args()
	if len(args) == 0 {
		fs.Usage()
		os.Exit(2)
	}
	var (
		code int
		err  error
	)
	switch {
	case *sites != "" && *points:
		fmt.Fprintln(os.Stderr, "mdbench: --sites and --probe-points do not go together")
		os.Exit(2)
	case *batch && *sites == "":
		fmt.Fprintln(os.Stderr, "mdbench: --batch goes with --sites")
		os.Exit(2)
	case *sites != "":
		code, err = runSites(args, *sites, *batch)
	default:
		code, err = run(args, *points)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mdbench: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// probes are the empty program, loaded, and the links that attach it.
type probes struct {
	objs  bpf.EmptyObjects
	multi bool
	links []link.Link
}

func loadProbes() (*probes, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	spec, err := bpf.LoadEmpty()
	if err != nil {
		return nil, err
	}
	p := &probes{multi: features.HaveBPFLinkUprobeMulti() == nil}
	if p.multi {
		spec.Programs["empty_probe"].AttachType = ebpf.AttachTraceUprobeMulti
	}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *probes) Close() {
	for _, l := range p.links {
		l.Close()
	}
	p.objs.Close()
}

func (p *probes) add(l link.Link, err error) error {
	if err == nil {
		p.links = append(p.links, l)
	}
	return err
}

// fn is a function to probe and its offset in its file.
type fn struct {
	symbol string
	offset uint64
}

func offsetsOf(fns []fn) []uint64 {
	var offs []uint64
	for _, f := range fns {
		offs = append(offs, f.offset)
	}
	return offs
}

// attach puts the empty program on the functions entry (entry probes) and
// ret (return probes) of the file lib, for process pid only.
func (p *probes) attach(pid int, lib string, entry, ret []fn) error {
	ex, err := link.OpenExecutable(lib)
	if err != nil {
		return err
	}
	if p.multi {
		err := p.add(ex.UprobeMulti(nil, p.objs.EmptyProbe, &link.UprobeMultiOptions{Addresses: offsetsOf(entry), PID: uint32(pid)}))
		if err == nil && len(ret) > 0 {
			err = p.add(ex.UretprobeMulti(nil, p.objs.EmptyProbe, &link.UprobeMultiOptions{Addresses: offsetsOf(ret), PID: uint32(pid)}))
		}
		return err
	}
	for _, f := range entry {
		if err := p.add(ex.Uprobe(f.symbol, p.objs.EmptyProbe, &link.UprobeOptions{Address: f.offset, PID: pid})); err != nil {
			return err
		}
	}
	for _, f := range ret {
		if err := p.add(ex.Uretprobe(f.symbol, p.objs.EmptyProbe, &link.UprobeOptions{Address: f.offset, PID: pid})); err != nil {
			return err
		}
	}
	return nil
}

// run runs argv with empty probes on its allocator's malloc (entry and
// return) and free (entry), at their entries or, with points, at mdtrace's
// probe points.
func run(argv []string, points bool) (int, error) {
	p, err := loadProbes()
	if err != nil {
		return 1, err
	}
	defer p.Close()
	proc, err := tracer.Launch(argv, nil, nil, tracer.Hooks{
		Ready: func(pid int) error {
			libF, err := tracer.AllocatorOfExec(pid)
			if err != nil {
				return err
			}
			lib := libF.Path
			offset := tracer.FuncOffset
			if points {
				offset = tracer.ProbeOffset
			}
			var entry, ret []fn
			for _, sym := range []string{"malloc", "free"} {
				off, err := offset(lib, sym)
				if err != nil {
					return err
				}
				entry = append(entry, fn{sym, off})
				if sym == "malloc" {
					ret = append(ret, fn{sym, off})
				}
			}
			return p.attach(pid, lib, entry, ret)
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

// runSites runs argv with the shim preloaded, without options, and empty
// entry probes on its two probe sites, and with batch on its batch site,
// the shim batching. It fails when the command ended without the shim
// mapped: its probes could not have been hit.
func runSites(argv []string, shim string, batch bool) (int, error) {
	shim, err := filepath.Abs(shim)
	if err != nil {
		return 1, err
	}
	if strings.ContainsAny(shim, " :") {
		return 1, fmt.Errorf("the shim's path %q holds a space or a colon, which LD_PRELOAD cannot", shim)
	}
	var sites []fn
	symbols := siteSymbols
	env := tracer.PreloadEnv(os.Environ(), shim, abi.EnvOptions+"=")
	if batch {
		symbols = append(symbols, "mdshim_site_batch")
		// MDSHIM_CTL: as under mdtrace, whose socket is not needed here.
		env = append(env, abi.EnvBatch+"=16", abi.EnvCtl+"=/nonexistent")
	}
	for _, sym := range symbols {
		off, err := tracer.FuncOffset(shim, sym)
		if err != nil {
			return 1, err
		}
		sites = append(sites, fn{sym, off})
	}
	p, err := loadProbes()
	if err != nil {
		return 1, err
	}
	defer p.Close()
	mapped := false
	proc, err := tracer.Launch(argv, env, nil, tracer.Hooks{
		Ready: func(pid int) error {
			return p.attach(pid, shim, sites, nil)
		},
		Exit: func(pid int) {
			maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
			mapped = bytes.Contains(maps, []byte(" "+shim+"\n"))
		},
	})
	if err != nil {
		return 1, err
	}
	st, err := proc.Wait()
	if err != nil {
		return 1, err
	}
	if !mapped {
		return 1, errors.New("the command ran without the shim: LD_PRELOAD did not load it")
	}
	return st.Code, nil
}
