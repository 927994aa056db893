package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/mdtrace/mdtrace/dumps"
	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
)

// The subcommands that read what mdtrace (or Android's malloc debug)
// wrote; anything else is a command to launch ("mdtrace -- report" launches
// a program named report).
var subcommands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"report":      runReport,
	"diff":        runDiff,
	"replay":      runReplay,
	"stats":       runStats,
	"unreachable": runUnreachable,
}

const reportUsage = `usage: mdtrace report [--symbols DIR] [--debug-dir DIR] [--format text|folded|pprof|html]
                      [--top N] [--tree caller|callee [--min-percent P]] [-o FILE] DUMP
Reads an Android Native Heap Dump (v1.0, v1.1 or v1.2: mdtrace's, or a device's) and writes its totals and its
allocations by backtrace, symbolized; "folded" writes flame graph input, "pprof" a profile for go tool pprof,
"html" one self-contained page: a flame graph of the live bytes (click a frame to zoom, search by function).
--tree writes the text report as a tree, one function a line with its bytes, share and allocations, each
indented under the one before it on the backtraces: "caller" from the outermost functions (_start) down to the
ones that allocate, "callee" from the functions that allocate up to their callers; a node's children under
--min-percent of the bytes each are added up on one line.
`

const diffUsage = `usage: mdtrace diff [--symbols DIR] [--debug-dir DIR] [--top N] [-o FILE] OLD NEW
Writes the growth by backtrace between two heap dumps of one process, the largest first, shrinking ones last.
`

// dumpFlags are the flags report and diff share.
type dumpFlags struct {
	fs        *pflag.FlagSet
	usage     string
	symbols   string
	debugDirs []string
	top       int
	help      bool
}

func newDumpFlags(name, usage string, top int) *dumpFlags {
	f := &dumpFlags{fs: pflag.NewFlagSet(name, pflag.ContinueOnError), usage: usage}
	f.fs.SetOutput(io.Discard)
	f.fs.BoolVarP(&f.help, "help", "h", false, "show this help")
	f.fs.StringVar(&f.symbols, "symbols", "", "symbolize from copies of the dump's files under `DIR` (DIR/system/lib64/libc.so for /system/lib64/libc.so), as native_heapdump_viewer.py --symbols")
	f.fs.StringArrayVar(&f.debugDirs, "debug-dir", nil, "search `DIR` for separate debug files (repeatable)")
	f.fs.IntVar(&f.top, "top", top, "show at most `N` backtraces (0: all)")
	return f
}

// parse parses args; done is set, with the exit status, when there is
// nothing more to do: help given, or a usage error (said on stderr).
func (f *dumpFlags) parse(args []string, stdout, stderr io.Writer) (status int, done bool) {
	if err := f.fs.Parse(args); err != nil {
		return usageError(stderr, err, f.usage), true
	}
	if f.help {
		fmt.Fprint(stdout, f.usage)
		f.fs.SetOutput(stdout)
		f.fs.PrintDefaults()
		return 0, true
	}
	if f.symbols != "" {
		if fi, err := os.Stat(f.symbols); err != nil || !fi.IsDir() {
			return usageError(stderr, fmt.Errorf("--symbols %s: not a directory", f.symbols), f.usage), true
		}
	}
	return 0, false
}

func (f *dumpFlags) symbolizer() *stacks.Symbolizer {
	sym := stacks.NewSymbolizer()
	sym.DebugDirs = f.debugDirs
	sym.SymbolRoot = f.symbols
	return sym
}

// usageError prints err and usage, and returns 2.
func usageError(stderr io.Writer, err error, usage string) int {
	fmt.Fprintf(stderr, "mdtrace: %v\n%s", err, usage)
	return 2
}

// parseSubcommand parses a subcommand's arguments with fs, whose -h/--help
// flag is help: a usage error or the help (to stdout) end the subcommand
// with the status returned, done true.
func parseSubcommand(fs *pflag.FlagSet, help *bool, args []string, usage string, stdout, stderr io.Writer) (status int, done bool) {
	if err := fs.Parse(args); err != nil {
		return usageError(stderr, err, usage), true
	}
	if *help {
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0, true
	}
	return 0, false
}

// writeOutput writes with write to the file out (0600, atomically), or to
// stdout when out is "".
func writeOutput(out string, stdout io.Writer, write func(io.Writer) error) error {
	if out == "" {
		return write(stdout)
	}
	return output.WriteFileAtomic(out, 0o600, write)
}

func runReport(args []string, stdout, stderr io.Writer) int {
	f := newDumpFlags("report", reportUsage, 50)
	format := f.fs.String("format", "text", "`text`, folded, pprof or html")
	out := f.fs.StringP("output", "o", "", "write to `FILE` instead of standard output")
	tree := f.fs.String("tree", "", "write the text report as a tree by `caller` or by callee")
	minPercent := f.fs.Float64("min-percent", 1, "with --tree, add up on one line a node's children under `P` percent of the bytes each")
	if status, done := f.parse(args, stdout, stderr); done {
		return status
	}
	if f.fs.NArg() != 1 {
		return usageError(stderr, errors.New("report reads one heap dump"), reportUsage)
	}
	switch {
	case *tree != "" && *tree != "caller" && *tree != "callee":
		return usageError(stderr, fmt.Errorf("unknown --tree %q: caller or callee", *tree), reportUsage)
	case *tree != "" && *format != "text":
		return usageError(stderr, fmt.Errorf("--tree is a text report's: not with --format %s", *format), reportUsage)
	case f.fs.Changed("min-percent") && *tree == "":
		return usageError(stderr, errors.New("--min-percent goes with --tree"), reportUsage)
	case *minPercent < 0 || *minPercent > 100:
		return usageError(stderr, fmt.Errorf("--min-percent %g: not between 0 and 100", *minPercent), reportUsage)
	}
	var write func(io.Writer, *dumps.Dump) error
	switch *format {
	case "text":
		write = func(w io.Writer, d *dumps.Dump) error { return dumps.WriteText(w, d, f.top) }
		if *tree != "" {
			write = func(w io.Writer, d *dumps.Dump) error { return dumps.WriteTree(w, d, *tree == "callee", *minPercent) }
		}
	case "html":
		write = dumps.WriteHTML
	case "folded":
		write = dumps.WriteFolded
	case "pprof":
		if *out == "" && output.IsTerminal(stdout) {
			return usageError(stderr, errors.New("a pprof profile is binary: give -o FILE, or redirect standard output"), reportUsage)
		}
		write = func(w io.Writer, d *dumps.Dump) error { return dumps.Profile(d).Write(w) }
	default:
		return usageError(stderr, fmt.Errorf("unknown --format %q: text, folded, pprof or html", *format), reportUsage)
	}
	d, p, err := f.readDump(f.fs.Arg(0), f.symbolizer(), stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	p.update(d.RecordCount, "writing the report")
	err = writeOutput(*out, stdout, func(w io.Writer) error { return write(w, d) })
	if err != nil {
		p.done("stopped")
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	p.done("report of %d records, %d backtraces written to %s", d.RecordCount, len(d.Sites), where(*out))
	return 0
}

func runDiff(args []string, stdout, stderr io.Writer) int {
	f := newDumpFlags("diff", diffUsage, 0)
	out := f.fs.StringP("output", "o", "", "write to `FILE` instead of standard output")
	if status, done := f.parse(args, stdout, stderr); done {
		return status
	}
	if f.fs.NArg() != 2 {
		return usageError(stderr, errors.New("diff reads two heap dumps, the older first"), diffUsage)
	}
	sym := f.symbolizer()
	var ds [2]*dumps.Dump
	var p *progress
	for i := range ds {
		d, pi, err := f.readDump(f.fs.Arg(i), sym, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "mdtrace: %v\n", err)
			return 1
		}
		if pi.line != nil {
			pi.done("read %d records, %d backtraces", d.RecordCount, len(d.Sites))
			p = pi
		}
		ds[i] = d
	}
	if err := writeOutput(*out, stdout, func(w io.Writer) error { return dumps.WriteDiff(w, ds[0], ds[1], f.top) }); err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	if p != nil {
		fmt.Fprintf(stderr, "mdtrace: diff of %s and %s written to %s\n", ds[0].Path, ds[1].Path, where(*out))
	}
	return 0
}

// subcommand returns the subcommand args name, if any.
func subcommand(args []string) (func([]string, io.Writer, io.Writer) int, []string) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return nil, args
	}
	if run, ok := subcommands[args[0]]; ok {
		return run, args[1:]
	}
	return nil, args
}

// progress is a subcommand's progress line on standard error, for a
// person at a terminal: drawn once the input proves long enough to need
// one (output.NewProgress decides), never on a file or a pipe.
type progress struct {
	w      io.Writer
	prefix string
	line   *output.Progress
}

// update redraws the line, n items into the work.
func (p *progress) update(n int, format string, args ...any) {
	if p.line == nil {
		if p.line = output.NewProgress(p.w, n, p.prefix); p.line == nil {
			return
		}
	}
	p.line.Update(format, args...)
}

// done ends the line, if there is one, with its last text.
func (p *progress) done(format string, args ...any) {
	p.line.Done(format, args...)
}

// readDump reads a dump with a progress line on stderr.
func (f *dumpFlags) readDump(path string, sym *stacks.Symbolizer, stderr io.Writer) (*dumps.Dump, *progress, error) {
	p := &progress{w: stderr, prefix: path}
	d, err := dumps.ReadProgress(path, sym, func(phase string, done, total int) {
		switch phase {
		case "reading":
			p.update(total, "reading: %d of %d records", done, total)
		default:
			p.update(0, "%s: %d of %d backtraces", phase, done, total)
		}
	})
	if err != nil && p.line != nil {
		// The error goes below the line.
		p.done("stopped")
	}
	return d, p, err
}

// where names the file output goes to, for a progress line.
func where(out string) string {
	if out == "" {
		return "standard output"
	}
	return out
}
