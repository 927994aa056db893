//go:build linux

package ctl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/internal/fixture"
	"github.com/mdtrace/mdtrace/leak"
)

// fakeCtl is a Handler that answers with fixed leak info and records
// every call.
type fakeCtl struct {
	status                         uint32
	buf                            []byte
	overall, infoSize, total, btSz uint64

	mu       sync.Mutex
	leaks    []int
	signals  [][2]int
	refusals []string
	refPIDs  []int
	adopted  []int
	events   chan string
}

func newFakeCtl() *fakeCtl { return &fakeCtl{events: make(chan string, 64)} }

func (f *fakeCtl) LeakInfo(pid int) (uint32, []byte, uint64, uint64, uint64, uint64) {
	f.mu.Lock()
	f.leaks = append(f.leaks, pid)
	status, buf, overall, infoSize, total, btSz := f.status, f.buf, f.overall, f.infoSize, f.total, f.btSz
	f.mu.Unlock()
	f.events <- "leakInfo"
	return status, buf, overall, infoSize, total, btSz
}

// calls returns copies of the calls so far.
func (f *fakeCtl) calls() (leaks []int, signals [][2]int, refusals []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.leaks), slices.Clone(f.signals), slices.Clone(f.refusals)
}

func (f *fakeCtl) Signal(pid, sig int) {
	f.mu.Lock()
	f.signals = append(f.signals, [2]int{pid, sig})
	f.mu.Unlock()
	f.events <- "signal"
}

func (f *fakeCtl) AdoptChild(pid int) bool {
	f.mu.Lock()
	f.adopted = append(f.adopted, pid)
	f.mu.Unlock()
	f.events <- "adopt"
	return false
}

func (f *fakeCtl) Exiting(pid int) {
	f.mu.Lock()
	f.signals = append(f.signals, [2]int{pid, 0})
	f.mu.Unlock()
	f.events <- "exiting"
}

// Unreachable answers for process 4242 with a report that says what was
// asked, fails for 4343, and traces no other process.
func (f *fakeCtl) Unreachable(pid int, contents bool) (uint32, []byte) {
	f.events <- "unreachable"
	switch pid {
	case 4242:
		return abi.CtlStatusOK, []byte(fmt.Sprintf("report of %d, contents %v\n", pid, contents))
	case 4343:
		return abi.CtlStatusFailed, []byte("process 4343: it is gone")
	}
	return abi.CtlStatusNotTraced, nil
}

func (f *fakeCtl) Refused(pid int, reason string) {
	f.mu.Lock()
	f.refusals = append(f.refusals, reason)
	f.refPIDs = append(f.refPIDs, pid)
	f.mu.Unlock()
	f.events <- "refused"
}

// event waits for the next callback.
func (f *fakeCtl) event(t *testing.T) string {
	t.Helper()
	select {
	case e := <-f.events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no callback from the control server")
		return ""
	}
}

// noEvent checks that no further callback comes.
func (f *fakeCtl) noEvent(t *testing.T) {
	t.Helper()
	select {
	case e := <-f.events:
		t.Errorf("unexpected callback %s", e)
	case <-time.After(50 * time.Millisecond):
	}
}

func startCtl(t *testing.T, allowed func(int) bool, h Handler) *Server {
	t.Helper()
	s, err := Listen(allowed, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func allowSelf(pid int) bool { return pid == os.Getpid() }

func dialCtl(t *testing.T, s *Server) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: s.Name(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func ctlRequest(magic, op, arg, zero uint32) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint32(b[0:], magic)
	binary.LittleEndian.PutUint32(b[4:], op)
	binary.LittleEndian.PutUint32(b[8:], arg)
	binary.LittleEndian.PutUint32(b[12:], zero)
	return b
}

// readAll reads until the server closes the connection; a reset counts
// as the end too (the server closed with the request unread).
func readAll(t *testing.T, c *net.UnixConn) []byte {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the answer: %v", err)
	}
	return b
}

func TestCtlLeakInfo(t *testing.T) {
	snap := &leak.Snapshot{
		Allocs: []leak.Alloc{
			{Ptr: 0x1000, Size: 100, StackID: 1},
			{Ptr: 0x2000, Size: 100, StackID: 1},
			{Ptr: 0x3000, Size: 9000, StackID: 2},
		},
		Stacks:        map[uint64][]uint64{1: {0x401000, 0x402000}, 2: {0x403000}},
		BacktraceSize: 2,
	}
	h := newFakeCtl()
	h.buf, h.overall, h.infoSize, h.total, h.btSz = snap.LeakInfo()
	s := startCtl(t, allowSelf, h)
	c := dialCtl(t, s)
	if _, err := c.Write([]byte{0x6d, 0x64, 0x74, 0x31, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, c)
	want := []byte{
		0x6d, 0x64, 0x74, 0x31, // magic
		0, 0, 0, 0, // status
		64, 0, 0, 0, 0, 0, 0, 0, // overall_size: 2 entries
		32, 0, 0, 0, 0, 0, 0, 0, // info_size: 16 + 8*2
		0xf0, 0x23, 0, 0, 0, 0, 0, 0, // total_memory: 9000 + 2*100
		2, 0, 0, 0, 0, 0, 0, 0, // backtrace_size
		0x28, 0x23, 0, 0, 0, 0, 0, 0, // 9000
		1, 0, 0, 0, 0, 0, 0, 0,
		0, 0x30, 0x40, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0,
		100, 0, 0, 0, 0, 0, 0, 0, // 100
		2, 0, 0, 0, 0, 0, 0, 0,
		0, 0x10, 0x40, 0, 0, 0, 0, 0,
		0, 0x20, 0x40, 0, 0, 0, 0, 0,
	}
	if !bytes.Equal(got, want) {
		t.Errorf("answer:\n% x\nwant:\n% x", got, want)
	}
	if e := h.event(t); e != "leakInfo" {
		t.Fatalf("callback %s, want leakInfo", e)
	}
	h.noEvent(t)
	if leaks, _, _ := h.calls(); len(leaks) != 1 || leaks[0] != os.Getpid() {
		t.Errorf("leakInfo called for %v, want [%d]", leaks, os.Getpid())
	}
}

func TestCtlLeakInfoEmptyAndNotTracked(t *testing.T) {
	for _, status := range []uint32{abi.CtlStatusOK, abi.CtlStatusNotTracked} {
		h := newFakeCtl()
		h.status = status
		// Sizes given with status 1 are not sent.
		if status == abi.CtlStatusNotTracked {
			h.infoSize, h.total, h.btSz = 48, 1234, 4
		}
		s := startCtl(t, allowSelf, h)
		c := dialCtl(t, s)
		c.Write(ctlRequest(abi.CtlMagic, abi.CtlOpLeakInfo, 0, 0))
		want := make([]byte, 40)
		copy(want, []byte{0x6d, 0x64, 0x74, 0x31, byte(status)})
		if got := readAll(t, c); !bytes.Equal(got, want) {
			t.Errorf("status %d: answer % x, want % x", status, got, want)
		}
		h.event(t)
		h.noEvent(t)
	}
}

func TestCtlSignal(t *testing.T) {
	h := newFakeCtl()
	s := startCtl(t, allowSelf, h)
	for _, sig := range []int{47, 45, 46, 48} {
		c := dialCtl(t, s)
		c.Write(ctlRequest(abi.CtlMagic, abi.CtlOpSignal, uint32(sig), 0))
		// The acknowledgement: the magic alone, after the handler acted.
		if got := readAll(t, c); !bytes.Equal(got, []byte{0x6d, 0x64, 0x74, 0x31}) {
			t.Errorf("signal %d answered with % x, want the magic", sig, got)
		}
		if e := h.event(t); e != "signal" {
			t.Fatalf("callback %s, want signal", e)
		}
		h.mu.Lock()
		last := h.signals[len(h.signals)-1]
		h.mu.Unlock()
		if last != [2]int{os.Getpid(), sig} {
			t.Errorf("signal(%d, %d), want signal(%d, %d)", last[0], last[1], os.Getpid(), sig)
		}
	}
	h.noEvent(t)
}

func TestCtlRefusedPeer(t *testing.T) {
	h := newFakeCtl()
	h.buf, h.overall, h.infoSize = make([]byte, 16), 16, 16
	var asked []int
	var mu sync.Mutex
	s := startCtl(t, func(pid int) bool {
		mu.Lock()
		asked = append(asked, pid)
		mu.Unlock()
		return false
	}, h)
	for _, req := range [][]byte{ctlRequest(abi.CtlMagic, abi.CtlOpLeakInfo, 0, 0), ctlRequest(abi.CtlMagic, abi.CtlOpSignal, 47, 0)} {
		c := dialCtl(t, s)
		c.Write(req)
		if got := readAll(t, c); len(got) != 0 {
			t.Errorf("a refused peer got % x", got)
		}
		if e := h.event(t); e != "refused" {
			t.Fatalf("callback %s, want refused", e)
		}
	}
	h.noEvent(t)
	mu.Lock()
	defer mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(asked) != 2 || asked[0] != os.Getpid() || asked[1] != os.Getpid() {
		t.Errorf("allowed asked of %v, want our pid %d twice", asked, os.Getpid())
	}
	for i, r := range h.refusals {
		if h.refPIDs[i] != os.Getpid() || !strings.Contains(r, fmt.Sprintf("process %d is not traced", os.Getpid())) {
			t.Errorf("refused(%d, %q)", h.refPIDs[i], r)
		}
	}
}

// TestCtlAdopt: a fork child asks to be followed, from a process that is
// not traced (it is not yet): the handler decides, and the answer carries
// its decision.
func TestCtlAdopt(t *testing.T) {
	h := newFakeCtl()
	s := startCtl(t, func(int) bool { return false }, h)
	c := dialCtl(t, s)
	c.Write(ctlRequest(abi.CtlMagic, abi.CtlOpAdopt, 0, 0))
	got := readAll(t, c)
	if e := h.event(t); e != "adopt" {
		t.Fatalf("callback %s, want adopt", e)
	}
	want := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, abi.CtlMagic), abi.CtlStatusRefused)
	if !bytes.Equal(got, want) {
		t.Errorf("answer % x, want % x", got, want)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.adopted) != 1 || h.adopted[0] != os.Getpid() {
		t.Errorf("adopt calls %v, want one for this process, %d", h.adopted, os.Getpid())
	}
}

func TestCtlBadRequest(t *testing.T) {
	cases := []struct {
		name, reason string
		req          []byte
	}{
		{"bad magic", "bad magic number 0x3174646e", ctlRequest(abi.CtlMagic+1, abi.CtlOpLeakInfo, 0, 0)},
		{"big endian magic", "bad magic number", []byte{0x31, 0x74, 0x64, 0x6d, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"unknown op", "op 7", ctlRequest(abi.CtlMagic, 7, 0, 0)},
		{"exiting arg", "op 6, arg 1", ctlRequest(abi.CtlMagic, abi.CtlOpExiting, 1, 0)},
		{"adopt arg", "op 3, arg 1", ctlRequest(abi.CtlMagic, abi.CtlOpAdopt, 1, 0)},
		{"op 0", "op 0", ctlRequest(abi.CtlMagic, 0, 0, 0)},
		{"leak info arg", "op 1, arg 5", ctlRequest(abi.CtlMagic, abi.CtlOpLeakInfo, 5, 0)},
		{"signal 0", "op 2, arg 0", ctlRequest(abi.CtlMagic, abi.CtlOpSignal, 0, 0)},
		{"signal 65", "op 2, arg 65", ctlRequest(abi.CtlMagic, abi.CtlOpSignal, 65, 0)},
		{"huge signal", "op 2, arg 4294967295", ctlRequest(abi.CtlMagic, abi.CtlOpSignal, 0xffffffff, 0)},
		{"last word", "last word 0x1", ctlRequest(abi.CtlMagic, abi.CtlOpLeakInfo, 0, 1)},
	}
	// Every refusal reported, more than a window's burst.
	defer func(b int) { refuseBurst = b }(refuseBurst)
	refuseBurst = len(cases)
	h := newFakeCtl()
	s := startCtl(t, allowSelf, h)
	for _, tc := range cases {
		c := dialCtl(t, s)
		c.Write(tc.req)
		if got := readAll(t, c); len(got) != 0 {
			t.Errorf("%s: answered with % x", tc.name, got)
		}
		if e := h.event(t); e != "refused" {
			t.Fatalf("%s: callback %s, want refused", tc.name, e)
		}
		h.mu.Lock()
		r := h.refusals[len(h.refusals)-1]
		h.mu.Unlock()
		if !strings.Contains(r, tc.reason) {
			t.Errorf("%s: refused %q, want it to say %q", tc.name, r, tc.reason)
		}
	}
	h.noEvent(t)
	if leaks, signals, _ := h.calls(); len(leaks) != 0 || len(signals) != 0 {
		t.Errorf("bad requests carried out: leakInfo %v, signal %v", leaks, signals)
	}
}

func TestCtlShortRequest(t *testing.T) {
	h := newFakeCtl()
	s := startCtl(t, allowSelf, h)
	for _, n := range []int{0, 1, 8, 15} {
		c := dialCtl(t, s)
		c.Write(ctlRequest(abi.CtlMagic, abi.CtlOpLeakInfo, 0, 0)[:n])
		c.CloseWrite()
		if got := readAll(t, c); len(got) != 0 {
			t.Errorf("%d bytes: answered with % x", n, got)
		}
		if e := h.event(t); e != "refused" {
			t.Fatalf("%d bytes: callback %s, want refused", n, e)
		}
		h.mu.Lock()
		r := h.refusals[len(h.refusals)-1]
		h.mu.Unlock()
		if !strings.Contains(r, fmt.Sprintf("sent %d of 16 request bytes", n)) {
			t.Errorf("%d bytes: refused %q", n, r)
		}
	}
	h.noEvent(t)
}

func TestCtlRequestTimeout(t *testing.T) {
	defer func(d time.Duration) { readTimeout = d }(readTimeout)
	readTimeout = 100 * time.Millisecond
	h := newFakeCtl()
	s := startCtl(t, allowSelf, h)
	c := dialCtl(t, s)
	c.Write([]byte{0x6d, 0x64})
	if got := readAll(t, c); len(got) != 0 {
		t.Errorf("answered with % x", got)
	}
	if e := h.event(t); e != "refused" {
		t.Fatalf("callback %s, want refused", e)
	}
}

func TestCtlInconsistentLeakInfo(t *testing.T) {
	cases := []struct {
		name                           string
		buf                            []byte
		overall, infoSize, total, btSz uint64
	}{
		{"overall is not the buffer", make([]byte, 32), 64, 32, 0, 2},
		{"info_size is not 16+8*backtrace_size", make([]byte, 32), 32, 32, 0, 1},
		{"no info_size", make([]byte, 32), 32, 0, 0, 0},
		{"backtrace_size overflows", make([]byte, 32), 32, 0, 0, 1 << 61},
		{"not whole entries", make([]byte, 40), 40, 24, 0, 1},
	}
	for _, tc := range cases {
		h := newFakeCtl()
		h.buf, h.overall, h.infoSize, h.total, h.btSz = tc.buf, tc.overall, tc.infoSize, tc.total, tc.btSz
		s := startCtl(t, allowSelf, h)
		c := dialCtl(t, s)
		c.Write(ctlRequest(abi.CtlMagic, abi.CtlOpLeakInfo, 0, 0))
		if got := readAll(t, c); len(got) != 0 {
			t.Errorf("%s: answered with % x", tc.name, got)
		}
		h.event(t) // leakInfo
		if e := h.event(t); e != "refused" {
			t.Errorf("%s: callback %s, want refused", tc.name, e)
		}
	}
}

func TestCtlCloseWithOpenConnection(t *testing.T) {
	before := runtime.NumGoroutine()
	h := newFakeCtl()
	s, err := Listen(allowSelf, h)
	if err != nil {
		t.Fatal(err)
	}
	c := dialCtl(t, s)
	c.Write([]byte{0x6d}) // a request begun, never finished
	// Wait until the server holds the connection.
	for deadline := time.Now().Add(5 * time.Second); ; {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not accept the connection")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	if got := readAll(t, c); len(got) != 0 {
		t.Errorf("answered with % x", got)
	}
	h.noEvent(t) // Close's own closing is not reported
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: s.Name(), Net: "unix"}); err == nil {
		t.Error("the socket still accepts connections after Close")
	}
	var after int
	for deadline := time.Now().Add(2 * time.Second); ; {
		if after = runtime.NumGoroutine(); after <= before || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if after > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", after, before, buf[:runtime.Stack(buf, true)])
	}
}

func TestCtlNameAndEnv(t *testing.T) {
	h := newFakeCtl()
	a := startCtl(t, allowSelf, h)
	b := startCtl(t, allowSelf, h)
	if !regexp.MustCompile(`^/(run|tmp)/mdtrace-ctl-[0-9]+-[0-9]+-[0-9]+/socket$`).MatchString(a.Name()) {
		t.Errorf("name %q", a.Name())
	}
	if a.Name() == b.Name() {
		t.Errorf("two servers named %q", a.Name())
	}
	if a.Env() != abi.EnvCtl+"="+a.Name() {
		t.Errorf("Env() = %q", a.Env())
	}
	if _, err := Listen(nil, h); err == nil {
		t.Error("Listen accepted a nil peer check")
	}
	if _, err := Listen(allowSelf, nil); err == nil {
		t.Error("Listen accepted a nil handler")
	}
}

// shimCommand runs prog under the shim with options and the control
// socket of s, and returns its stdout, its log lines (priority letter and
// message) and its pid.
func shimCommand(t *testing.T, s *Server, options string, args ...string) (stdout string, log []string, pid int, err error) {
	t.Helper()
	cmd := exec.Command(fixture.Program(t, "leakinfo"), args...)
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "LD_PRELOAD", abi.EnvOptions, abi.EnvCtl, abi.EnvLogFD, abi.EnvRecord:
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "LD_PRELOAD="+fixture.Shim(t), abi.EnvOptions+"="+options)
	if s != nil {
		cmd.Env = append(cmd.Env, s.Env())
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	hdr := regexp.MustCompile(`^\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} +\d+ +\d+ ([EI]) malloc_debug: (.*)$`)
	for _, l := range strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n") {
		if m := hdr.FindStringSubmatch(l); m != nil {
			log = append(log, m[1]+" "+m[2])
		} else if l != "" {
			log = append(log, "? "+l)
		}
	}
	if cmd.Process != nil {
		pid = cmd.Process.Pid
	}
	return out.String(), log, pid, err
}

const nullArgsLine = "E get_malloc_leak_info: At least one invalid parameter."

// TestCtlShimLeakInfo runs testdata/leakinfo under the real shim against
// the server: the C client and the Go server agree on the framing.
func TestCtlShimLeakInfo(t *testing.T) {
	snap := &leak.Snapshot{
		Allocs: []leak.Alloc{
			{Ptr: 0x1000, Size: 100, StackID: 1},
			{Ptr: 0x2000, Size: 100, StackID: 1},
			{Ptr: 0x3000, Size: 100, StackID: 1},
			{Ptr: 0x4000, Size: 9000, StackID: 2},
			{Ptr: 0x5000, Size: 200},
		},
		Stacks:        map[uint64][]uint64{1: {0x10, 0x20}, 2: {0x30}},
		BacktraceSize: 16,
	}
	var mu sync.Mutex
	var peers []int
	allowAll := func(pid int) bool {
		mu.Lock()
		peers = append(peers, pid)
		mu.Unlock()
		return true
	}
	h := newFakeCtl()
	h.buf, h.overall, h.infoSize, h.total, h.btSz = snap.LeakInfo()
	s := startCtl(t, allowAll, h)

	out, log, pid, err := shimCommand(t, s, "backtrace")
	if err != nil {
		t.Fatalf("leakinfo: %v\n%s\n%s", err, out, strings.Join(log, "\n"))
	}
	want := "overall_size=288 info_size=144 total_memory=9300 backtrace_size=16 entries=2\n" +
		"size=9000 num=1 first_frame=?\n" +
		"size=100 num=3 first_frame=?\n" +
		"null_check=ok\n"
	if out != want {
		t.Errorf("leakinfo printed:\n%s\nwant:\n%s", out, want)
	}
	if strings.Join(log, "\n") != nullArgsLine {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(log, "\n"), nullArgsLine)
	}
	mu.Lock()
	if len(peers) != 1 || peers[0] != pid {
		t.Errorf("peers %v, want [%d]", peers, pid)
	}
	mu.Unlock()
	if leaks, _, _ := h.calls(); len(leaks) != 1 || leaks[0] != pid {
		t.Errorf("leakInfo called for %v, want [%d]", leaks, pid)
	}

	// Not tracked by mdtrace: Android's line, zeros.
	h.mu.Lock()
	h.status = abi.CtlStatusNotTracked
	h.mu.Unlock()
	out, log, _, _ = shimCommand(t, s, "backtrace")
	zeros := "overall_size=0 info_size=0 total_memory=0 backtrace_size=0 entries=0\nnull_check=ok\n"
	if out != zeros {
		t.Errorf("not tracked: leakinfo printed:\n%s", out)
	}
	wantLog := "E get_malloc_leak_info: Allocations not being tracked, to enable set the option 'backtrace'.\n" + nullArgsLine
	if strings.Join(log, "\n") != wantLog {
		t.Errorf("not tracked: log:\n%s\nwant:\n%s", strings.Join(log, "\n"), wantLog)
	}

	// A peer mdtrace does not serve: zeros and one error line.
	r := startCtl(t, func(int) bool { return false }, h)
	out, log, _, _ = shimCommand(t, r, "backtrace")
	if out != zeros {
		t.Errorf("refused: leakinfo printed:\n%s", out)
	}
	if len(log) != 2 || log[0] != "E get_malloc_leak_info: no answer from mdtrace: mdtrace closed the connection" || log[1] != nullArgsLine {
		t.Errorf("refused: log:\n%s", strings.Join(log, "\n"))
	}

	// Without the backtrace option the shim does not ask.
	before, _, _ := h.calls()
	out, log, _, _ = shimCommand(t, s, "leak_track")
	if out != zeros {
		t.Errorf("no backtrace: leakinfo printed:\n%s", out)
	}
	if strings.Join(log, "\n") != wantLog {
		t.Errorf("no backtrace: log:\n%s\nwant:\n%s", strings.Join(log, "\n"), wantLog)
	}
	if leaks, _, _ := h.calls(); len(leaks) != len(before) {
		t.Error("the shim asked mdtrace without the backtrace option")
	}
}

// TestCtlShimSignal sends Android's signals to a process under the shim:
// its handlers pass them on to the server.
func TestCtlShimSignal(t *testing.T) {
	h := newFakeCtl()
	s := startCtl(t, func(int) bool { return true }, h)
	out, log, pid, err := shimCommand(t, s, "verbose backtrace_enable_on_signal record_allocs check_unreachable_on_signal", "47", "45", "46", "48")
	if err != nil && !strings.Contains(strings.Join(log, "\n"), "Run: 'kill") {
		t.Skipf("the shim does not install its signal handlers (md_ctl_init is not called): %v", err)
	}
	if err != nil {
		t.Fatalf("leakinfo: %v\n%s\n%s", err, out, strings.Join(log, "\n"))
	}
	if !strings.HasSuffix(out, "raised 47\nraised 45\nraised 46\nraised 48\n") {
		t.Errorf("leakinfo printed:\n%s", out)
	}
	var got [][2]int
	for len(got) < 4 {
		// leakinfo asks for its leak info first.
		if e := h.event(t); e == "refused" {
			_, _, refusals := h.calls()
			t.Fatalf("refused: %v", refusals)
		}
		_, got, _ = h.calls()
	}
	// Each connection has its own goroutine: the calls come in any order.
	slices.SortFunc(got, func(a, b [2]int) int { return a[1] - b[1] })
	want := [][2]int{{pid, 45}, {pid, 46}, {pid, 47}, {pid, 48}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("signals %v, want %v", got, want)
	}
	for _, l := range log {
		if strings.HasPrefix(l, "E ") && l != nullArgsLine {
			t.Errorf("error line: %s", l)
		}
	}
}

// TestCtlRefusalsLimited: a peer that connects again and again is refused
// each time, but only refuseBurst refusals a window are reported one by
// one; the others are counted and said in one line at Close.
func TestCtlRefusalsLimited(t *testing.T) {
	defer func(b int, w time.Duration) { refuseBurst, refuseWindow = b, w }(refuseBurst, refuseWindow)
	refuseBurst, refuseWindow = 3, time.Hour
	h := newFakeCtl()
	s := startCtl(t, func(int) bool { return false }, h)
	for range 8 {
		c := dialCtl(t, s)
		c.Write(ctlRequest(abi.CtlMagic, abi.CtlOpSignal, 47, 0))
		if got := readAll(t, c); len(got) != 0 {
			t.Errorf("a refused peer got % x", got)
		}
	}
	for range 3 {
		if e := h.event(t); e != "refused" {
			t.Fatalf("callback %s, want refused", e)
		}
	}
	h.noEvent(t)
	s.Close()
	if e := h.event(t); e != "refused" {
		t.Fatalf("callback %s, want the count of refusals not reported", e)
	}
	_, _, refusals := h.calls()
	want := "control socket: 5 more requests refused, not reported one by one (at most 3 every 1h0m0s)"
	if len(refusals) != 4 || refusals[3] != want {
		t.Errorf("refusals %q, want 3 and then %q", refusals, want)
	}
}

// dialAs connects to the socket at path as user uid (group gid, no other
// groups), through Debian's python3, and returns "ok" or the errno's name.
func dialAs(t *testing.T, uid int, path string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("connecting as another user needs root")
	}
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no /usr/bin/python3 to connect as another user")
	}
	cmd := exec.Command(py, "-c", `
import errno, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    print("ok")
except OSError as e:
    print(errno.errorcode[e.errno])
`, path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 as uid %d: %v\n%s", uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Other users cannot connect to the socket, the user it is made for can;
// its directory is private and gone after Close.
func TestCtlOtherUsers(t *testing.T) {
	h := newFakeCtl()
	s := startCtl(t, allowSelf, h)
	if got := dialAs(t, 65534, s.Name()); got != "EACCES" {
		t.Errorf("nobody connecting to root's socket: %s, want EACCES", got)
	}
	h.noEvent(t)
	var st syscall.Stat_t
	if err := syscall.Lstat(s.Dir(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o711 || st.Uid != 0 {
		t.Errorf("directory mode %#o uid %d, want 0711 root", st.Mode&0o7777, st.Uid)
	}
	if err := syscall.Lstat(s.Name(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o600 || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || st.Uid != 0 {
		t.Errorf("socket mode %#o uid %d, want a socket 0600 root", st.Mode, st.Uid)
	}

	// Made for nobody (-u nobody): nobody connects, and is refused by the
	// peer check (nothing traced), as it sends no request.
	u, err := ListenAs(65534, 65534, allowSelf, h)
	if err != nil {
		t.Fatal(err)
	}
	if got := dialAs(t, 65534, u.Name()); got != "ok" {
		t.Errorf("nobody connecting to its own socket: %s, want ok", got)
	}
	if e := h.event(t); e != "refused" {
		t.Errorf("callback %s, want refused", e)
	}
	u.Close()
	s.Close()
	for _, dir := range []string{s.Dir(), u.Dir()} {
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Close: %v", dir, err)
		}
	}
}

// The directories of an mdtrace that is gone are removed by the next one;
// those of a running mdtrace stay.
func TestCtlStaleDirectories(t *testing.T) {
	start, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	base := socketBases[0]
	if os.Geteuid() != 0 {
		base = socketBases[1]
	}
	// This process with another start time is an mdtrace that is gone.
	stale, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-%d-", dirPrefix, os.Getpid(), start+1))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale+"/"+socketName, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-%d-", dirPrefix, os.Getpid(), start))
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	startCtl(t, allowSelf, newFakeCtl())
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale %s: %v", stale, err)
	}
	if _, err := os.Lstat(live); err != nil {
		t.Errorf("live %s: %v", live, err)
	}
}

// TestAskUnreachable: another mdtrace (run as root, as the tests are)
// finds the server that traces a process among the running ones and gets
// its report; a process no server traces is ErrNotTraced, and a failed
// check gives its reason.
func TestAskUnreachable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the socket directories are in /run")
	}
	h := newFakeCtl()
	startCtl(t, allowSelf, h)
	for _, contents := range []bool{false, true} {
		text, err := AskUnreachable(4242, contents, 10*time.Second)
		if want := fmt.Sprintf("report of 4242, contents %v\n", contents); err != nil || string(text) != want {
			t.Errorf("AskUnreachable(4242, %v) = %q, %v; want %q", contents, text, err, want)
		}
	}
	if _, err := AskUnreachable(4343, false, 10*time.Second); err == nil || !strings.Contains(err.Error(), "process 4343: the check failed: process 4343: it is gone") {
		t.Errorf("a failed check: %v", err)
	}
	if _, err := AskUnreachable(999999, false, 10*time.Second); !errors.Is(err, ErrNotTraced) {
		t.Errorf("a process nothing traces: %v, want ErrNotTraced", err)
	}
	if _, _, refusals := h.calls(); len(refusals) != 0 {
		t.Errorf("refusals %v", refusals)
	}
}

// TestCtlExiting: the shim's last destructor asks for the check at exit,
// and is answered as a signal once it is taken.
func TestCtlExiting(t *testing.T) {
	h := newFakeCtl()
	s := startCtl(t, allowSelf, h)
	c := dialCtl(t, s)
	c.Write(ctlRequest(abi.CtlMagic, abi.CtlOpExiting, 0, 0))
	if e := h.event(t); e != "exiting" {
		t.Fatalf("callback %s, want exiting", e)
	}
	if got := readAll(t, c); !bytes.Equal(got, binary.LittleEndian.AppendUint32(nil, abi.CtlMagic)) {
		t.Errorf("answer % x, want the magic", got)
	}
	h.noEvent(t)
}
