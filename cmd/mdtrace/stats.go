package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stats"
)

const statsUsage = `usage: mdtrace stats [-o FILE] RECORDS
Reads a record_allocs file (mdtrace's or a device's, with or without times) and writes heaptrack-like
statistics of its calls: the allocations and their bytes, the peak of the live heap and when it came, the
temporary allocations (freed with no other allocation by their thread between), and the sizes asked for, in
powers of two. A record_allocs file has no backtraces: for the call sites that allocate the most and that
hold the most at their peak, run the program under mdtrace --stats -o backtrace.
`

func runStats(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("stats", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.StringP("output", "o", "", "write to `FILE` instead of standard output")
	help := fs.BoolP("help", "h", false, "show this help")
	if status, done := parseSubcommand(fs, help, args, statsUsage, stdout, stderr); done {
		return status
	}
	if fs.NArg() != 1 {
		return usageError(stderr, errors.New("stats reads one record_allocs file"), statsUsage)
	}
	path := fs.Arg(0)
	p := &progress{w: stderr, prefix: path}
	st, late, err := readStats(path, p)
	if err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	opts := stats.Options{NoSites: "not in a record_allocs file, which has no backtraces (mdtrace --stats -o backtrace has them)"}
	if late > 0 {
		opts.Notes = append(opts.Notes, fmt.Sprintf("%d calls are out of the order of their times in the file: they were taken in the file's order", late))
	}
	write := func(w io.Writer) error {
		fmt.Fprintf(w, "Statistics of %s:\n", path)
		return st.Write(w, opts)
	}
	if err := writeOutput(*out, stdout, write); err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	p.done("statistics of %d calls written to %s", st.Calls(), where(*out))
	return 0
}

// readStats adds up the calls of a record_allocs file, in the file's
// order, which keeps each thread's calls in call order.
func readStats(path string, p *progress) (st *stats.Stats, late uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s: not a regular file", path)
	}
	// mdtrace writes the records by start time, and a call took effect
	// after it started: once a record is read, the calls that took
	// effect before its start can be handed over.
	o := stats.NewOrderer(stats.New())
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	var pos int64
	for sc.Scan() {
		n++
		pos += int64(len(sc.Bytes())) + 1
		if n%output.ProgressStep == 0 && fi.Size() > 0 {
			p.update(n, "reading: %d lines, %d%% of the file", n, min(pos, fi.Size())*100/fi.Size())
		}
		r, err := output.ParseRecord(sc.Text())
		if err != nil {
			var pe *output.RecordParseError
			if errors.As(err, &pe) {
				pe.Line = n
			}
			p.done("stopped")
			return nil, 0, fmt.Errorf("%s: %w", path, err)
		}
		o.Push(stats.CallOf(&r), r.StartNS)
	}
	if err := sc.Err(); err != nil {
		p.done("stopped")
		return nil, 0, fmt.Errorf("%s: reading line %d: %w", path, n+1, err)
	}
	if n == 0 {
		return nil, 0, fmt.Errorf("%s: no records", path)
	}
	o.Flush()
	return o.Stats(), o.Late, nil
}
