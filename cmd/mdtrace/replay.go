package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/tracer"
)

const replayUsage = `usage: mdtrace replay [--allocator LIB] RECORDS
Replays the allocator calls of a record_allocs file (mdtrace's or a device's, with or without times), each
recorded thread on a thread of its own, as Android's memory_replay does, and reports the calls by kind, the
peak of live bytes, the time spent in the allocator and the peak RSS. --allocator preloads another allocator
(such as libjemalloc.so.2) to compare allocators on the same trace. The calls are staged in an unnamed temporary
file under $TMPDIR (56 bytes a call), not in memory.
`

// The input of mdreplay (replay/mdreplay.h): a header, then one op per
// call, in the machine's byte order (little-endian on x86-64).
const (
	replayMagic    = "MDRPLAY1"
	replayOpSize   = 56
	replayNoID     = math.MaxUint64
	replayNoThread = math.MaxUint32
	// The kinds of calls are the output.RecordType values, 1 to 6.
	replayKinds = int(output.RecordThreadDone) + 1
)

// replayName is the file name of the replayer, installed beside mdtrace.
const replayName = "mdreplay"

// replayOps is a trace turned into mdreplay's input, staged in a
// temporary file (56 bytes a call) that no name leads to, so that a trace
// of millions of calls costs mdtrace the memory of its live blocks, not of
// its calls, and mdreplay reads its calls from the file itself.
type replayOps struct {
	file *os.File
	w    *bufio.Writer
	// threads counts the thread indexes: a TID seen again after its
	// thread_done is a new thread. seq is the number of calls of each.
	threads int
	tids    map[int32]uint32
	seq     []uint64
	// live maps a recorded pointer that is allocated to its id, the
	// thread and call that made it, and its recorded size.
	live  map[uint64]replayPtr
	ids   uint64
	count [replayKinds]uint64

	liveBytes, peakBytes uint64
	// What the trace holds that cannot be replayed as it is.
	unknownFrees    uint64 // a free of a pointer not allocated
	unknownReallocs uint64 // a realloc of one (replayed from NULL)
	failedInTrace   uint64 // a call that returned NULL (not replayed)
	reused          uint64 // an allocation at a live address
}

type replayPtr struct {
	id     uint64
	thread uint32
	seq    uint64
	size   uint64
}

func newReplayOps() (*replayOps, error) {
	f, err := os.CreateTemp("", "mdtrace-replay-*")
	if err != nil {
		return nil, fmt.Errorf("staging the calls to replay: %w", err)
	}
	// Nothing is left behind, whatever happens next.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("staging the calls to replay: %w", err)
	}
	o := &replayOps{file: f, w: bufio.NewWriterSize(f, 1<<20), tids: map[int32]uint32{}, live: map[uint64]replayPtr{}}
	o.w.Write(make([]byte, 24)) // the header, written last
	return o, nil
}

// close releases the staged calls.
func (o *replayOps) close() { o.file.Close() }

// thread returns the index of tid's current thread.
func (o *replayOps) thread(tid int32) uint32 {
	t, ok := o.tids[tid]
	if !ok {
		t = uint32(o.threads)
		o.threads++
		o.tids[tid] = t
		o.seq = append(o.seq, 0)
	}
	return t
}

// take removes the live pointer ptr, made by another thread or this one,
// and returns the dependency of a call of thread t on it.
func (o *replayOps) take(p replayPtr, ptr uint64, t uint32) (depThread uint32, depSeq uint64) {
	delete(o.live, ptr)
	o.liveBytes -= p.size
	if p.thread == t {
		return replayNoThread, 0
	}
	return p.thread, p.seq
}

// give records the new live pointer ptr of size bytes, made by the call
// thread t is making, and returns its id.
func (o *replayOps) give(ptr, size uint64, t uint32) uint64 {
	if old, ok := o.live[ptr]; ok {
		// The trace lost the free of the block there before: its
		// block stays allocated in the replay until the end.
		o.reused++
		o.liveBytes -= old.size
	}
	id := o.ids
	o.ids++
	o.live[ptr] = replayPtr{id: id, thread: t, seq: o.seq[t] + 1, size: size}
	o.liveBytes += size
	o.peakBytes = max(o.peakBytes, o.liveBytes)
	return id
}

// add turns one record into a call; line numbers its errors.
func (o *replayOps) add(r *output.Record, line int) error {
	t := o.thread(r.TID)
	depThread, depSeq := uint32(replayNoThread), uint64(0)
	id, oldID := uint64(replayNoID), uint64(replayNoID)
	size, arg := r.Size, r.Arg
	switch r.Type {
	case output.RecordMalloc, output.RecordCalloc, output.RecordMemalign:
		if r.Ptr == 0 {
			o.failedInTrace++
			return nil
		}
		bytes := size
		if r.Type == output.RecordCalloc {
			hi, lo := bits.Mul64(arg, size)
			if hi != 0 {
				return fmt.Errorf("record_allocs: line %d: calloc of %d elements of %d bytes returned a pointer", line, arg, size)
			}
			bytes = lo
		}
		id = o.give(r.Ptr, bytes, t)
	case output.RecordRealloc:
		if r.Ptr == 0 && size != 0 {
			o.failedInTrace++
			return nil
		}
		if r.Arg != 0 {
			if p, ok := o.live[r.Arg]; ok {
				depThread, depSeq = o.take(p, r.Arg, t)
				oldID = p.id
			} else {
				o.unknownReallocs++
			}
		}
		arg = 0
		if r.Ptr != 0 {
			id = o.give(r.Ptr, size, t)
		}
	case output.RecordFree:
		p, ok := o.live[r.Ptr]
		if !ok {
			o.unknownFrees++
			return nil
		}
		depThread, depSeq = o.take(p, r.Ptr, t)
		id = p.id
	case output.RecordThreadDone:
		delete(o.tids, r.TID)
	}
	o.seq[t]++
	o.count[r.Type]++
	var op [replayOpSize]byte
	le := binary.LittleEndian
	le.PutUint32(op[0:], uint32(r.Type))
	le.PutUint32(op[4:], t)
	le.PutUint32(op[8:], depThread)
	le.PutUint64(op[16:], depSeq)
	le.PutUint64(op[24:], id)
	le.PutUint64(op[32:], oldID)
	le.PutUint64(op[40:], size)
	le.PutUint64(op[48:], arg)
	o.w.Write(op[:])
	return nil
}

// readReplayOps reads a record_allocs file into mdreplay's input, telling
// p how far it is.
func readReplayOps(path string, p *progress) (*replayOps, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var size int64
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	} else {
		size = fi.Size()
	}
	o, err := newReplayOps()
	if err != nil {
		return nil, err
	}
	if err := o.read(f, path, size, p); err != nil {
		o.close()
		return nil, err
	}
	return o, nil
}

func (o *replayOps) read(f io.Reader, path string, size int64, p *progress) error {
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	var pos int64
	for sc.Scan() {
		n++
		pos += int64(len(sc.Bytes())) + 1
		if n%output.ProgressStep == 0 && size > 0 {
			p.update(n, "reading: %d lines, %d%% of the file", n, min(pos, size)*100/size)
		}
		r, err := output.ParseRecord(sc.Text())
		if err != nil {
			var pe *output.RecordParseError
			if errors.As(err, &pe) {
				pe.Line = n
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := o.add(&r, n); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: reading line %d: %w", path, n+1, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: no records", path)
	}
	if o.ids > math.MaxInt64/8 || o.threads >= replayNoThread {
		return fmt.Errorf("%s: too many pointers or threads to replay", path)
	}
	var h [24]byte
	copy(h[:], replayMagic)
	binary.LittleEndian.PutUint32(h[8:], uint32(o.threads))
	binary.LittleEndian.PutUint64(h[16:], o.ids)
	if err := o.w.Flush(); err != nil {
		return fmt.Errorf("staging the calls to replay: %w", err)
	}
	if _, err := o.file.WriteAt(h[:], 0); err != nil {
		return fmt.Errorf("staging the calls to replay: %w", err)
	}
	if _, err := o.file.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("staging the calls to replay: %w", err)
	}
	var calls uint64
	for _, c := range o.count {
		calls += c
	}
	p.done("%d lines read, %d calls of %d threads to replay", n, calls, o.threads)
	return nil
}

// replayResult is what mdreplay measured.
type replayResult struct {
	threads   uint64
	count     [replayKinds]uint64
	callNS    uint64
	wallNS    uint64
	failed    uint64
	left      uint64
	rssBefore uint64
	maxRSS    uint64
	allocator string
}

func parseReplayResult(b []byte) (*replayResult, error) {
	var r replayResult
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "allocator" {
			r.allocator = f[1]
			seen[f[0]] = true
			continue
		}
		if len(f) == 3 && f[0] == "count" {
			k, err1 := strconv.Atoi(f[1])
			v, err2 := strconv.ParseUint(f[2], 10, 64)
			if err1 != nil || err2 != nil || k <= 0 || k >= replayKinds {
				return nil, fmt.Errorf("mdreplay's result: bad line %q", line)
			}
			r.count[k] = v
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("mdreplay's result: bad line %q", line)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("mdreplay's result: bad line %q", line)
		}
		fields := map[string]*uint64{"threads": &r.threads, "call_ns": &r.callNS, "wall_ns": &r.wallNS, "failed": &r.failed,
			"left": &r.left, "rss_before_kb": &r.rssBefore, "max_rss_kb": &r.maxRSS}
		p, ok := fields[f[0]]
		if !ok {
			return nil, fmt.Errorf("mdreplay's result: bad line %q", line)
		}
		*p = v
		seen[f[0]] = true
	}
	if len(seen) != 8 {
		return nil, fmt.Errorf("mdreplay's result is incomplete:\n%s", b)
	}
	return &r, nil
}

// findReplayer returns the path of mdreplay.
func findReplayer() (string, error) {
	path, tried, err := options.Installed(replayName)
	if err != nil {
		return "", fmt.Errorf("finding mdreplay: %w", err)
	}
	if path == "" {
		return "", fmt.Errorf("no mdreplay next to mdtrace or where make install puts it (%s)", strings.Join(tried, ", "))
	}
	return path, nil
}

// replayEnv is the environment of mdreplay: mdtrace's, with LD_PRELOAD
// only the allocator asked for.
func replayEnv(allocator string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_PRELOAD=") {
			env = append(env, kv)
		}
	}
	if allocator != "" {
		env = append(env, "LD_PRELOAD="+allocator)
	}
	return env
}

func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("replay", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	allocator := fs.String("allocator", "", "replay with the allocator of shared library `LIB` preloaded (LD_PRELOAD)")
	help := fs.BoolP("help", "h", false, "show this help")
	if status, done := parseSubcommand(fs, help, args, replayUsage, stdout, stderr); done {
		return status
	}
	if fs.NArg() != 1 {
		return usageError(stderr, errors.New("replay reads one record_allocs file"), replayUsage)
	}
	lib := *allocator
	if lib != "" {
		abs, err := filepath.Abs(lib)
		if err == nil {
			err = tracer.CheckExecutable(abs)
		}
		if err != nil {
			return usageError(stderr, fmt.Errorf("--allocator: %w", err), replayUsage)
		}
		if strings.ContainsAny(abs, " :") {
			return usageError(stderr, fmt.Errorf("--allocator %q: a path with a space or a colon cannot be preloaded", abs), replayUsage)
		}
		lib = abs
	}
	replayer, err := findReplayer()
	if err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	path := fs.Arg(0)
	ops, err := readReplayOps(path, &progress{w: stderr, prefix: path})
	if err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	defer ops.close()
	res, err := runReplayer(replayer, lib, ops, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mdtrace: %v\n", err)
		return 1
	}
	if res.count != ops.count {
		fmt.Fprintf(stderr, "mdtrace: mdreplay made %v calls by kind, not the %v of the trace\n", res.count[1:], ops.count[1:])
		return 1
	}
	if lib != "" {
		a, err1 := os.Stat(lib)
		b, err2 := os.Stat(res.allocator)
		if err1 != nil || err2 != nil || !os.SameFile(a, b) {
			fmt.Fprintf(stderr, "mdtrace: --allocator %s: malloc in the replay was %s's: the library does not replace malloc\n", lib, res.allocator)
			return 1
		}
	}
	writeReplayReport(stdout, path, ops, res)
	return 0
}

// runReplayer runs mdreplay on ops and returns what it measured.
func runReplayer(replayer, lib string, ops *replayOps, stderr io.Writer) (*replayResult, error) {
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	cmd := exec.Command(replayer, "3")
	cmd.Env = replayEnv(lib)
	cmd.Stdin = ops.file
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	cmd.ExtraFiles = []*os.File{wr}
	if err := cmd.Start(); err != nil {
		wr.Close()
		return nil, fmt.Errorf("running mdreplay: %w", err)
	}
	wr.Close()
	out, rerr := io.ReadAll(rd)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("mdreplay: %w", err)
	}
	if rerr != nil {
		return nil, fmt.Errorf("reading mdreplay's result: %w", rerr)
	}
	return parseReplayResult(out)
}

func writeReplayReport(w io.Writer, path string, ops *replayOps, res *replayResult) {
	var calls uint64
	for k := output.RecordMalloc; k < output.RecordThreadDone; k++ {
		calls += res.count[k]
	}
	fmt.Fprintf(w, "Replay of %s: %d threads, allocator %s\n", path, res.threads, res.allocator)
	for k := output.RecordMalloc; k <= output.RecordThreadDone; k++ {
		fmt.Fprintf(w, "  %-12s %d\n", k.String()+":", res.count[k])
	}
	mean := 0.0
	if calls > 0 {
		mean = float64(res.callNS) / float64(calls)
	}
	fmt.Fprintf(w, "Allocator calls: %d in %v, %.1f ns a call (wall time %v)\n", calls,
		time.Duration(res.callNS), mean, time.Duration(res.wallNS).Round(time.Microsecond))
	fmt.Fprintf(w, "Peak live bytes (recorded sizes): %d\n", ops.peakBytes)
	fmt.Fprintf(w, "Peak RSS: %d kB (%d kB before the replay)\n", res.maxRSS, res.rssBefore)
	notes := []struct {
		n    uint64
		what string
	}{
		{ops.unknownFrees, "frees of a pointer the trace does not allocate: not replayed"},
		{ops.unknownReallocs, "reallocs of a pointer the trace does not allocate: replayed from NULL"},
		{ops.failedInTrace, "calls that failed in the trace (returned NULL): not replayed"},
		{ops.reused, "allocations at an address the trace had not freed: the older block was kept until the end"},
		{res.failed, "allocations that failed in the replay"},
		{res.left, "blocks still allocated at the end of the trace, freed after it (untimed)"},
	}
	for _, n := range notes {
		if n.n != 0 {
			fmt.Fprintf(w, "Note: %d %s\n", n.n, n.what)
		}
	}
}
