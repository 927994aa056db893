package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayOps: the calls mdtrace replay hands to mdreplay, with the
// waits of a thread on the call that made its pointer in another thread,
// and the counts of what the trace holds that is not replayed.
func TestReplayOps(t *testing.T) {
	const trace = `100: malloc 0xa000 100 1 2
100: calloc 0xb000 4 25
101: memalign 0xc000 64 200
101: free 0xa000
100: realloc 0xd000 0xb000 300
100: free 0xdead
101: thread_done 0x0
100: realloc 0x0 0xd000 0
101: malloc 0x0 10
101: malloc 0xe000 10
100: free 0xc000
`
	path := filepath.Join(t.TempDir(), "records")
	if err := os.WriteFile(path, []byte(trace), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := readReplayOps(path, &progress{w: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	b, err := io.ReadAll(o.file)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:8]) != replayMagic || binary.LittleEndian.Uint32(b[8:]) != 3 || binary.LittleEndian.Uint64(b[16:]) != 5 {
		t.Fatalf("header %x: want 3 threads, 5 ids", b[:24])
	}
	var got strings.Builder
	le := binary.LittleEndian
	for op := b[24:]; len(op) > 0; op = op[replayOpSize:] {
		id := func(v uint64) string {
			if v == replayNoID {
				return "-"
			}
			return fmt.Sprint(v)
		}
		dep := "-"
		if th := le.Uint32(op[8:]); th != replayNoThread {
			dep = fmt.Sprintf("%d/%d", th, le.Uint64(op[16:]))
		}
		fmt.Fprintf(&got, "kind %d thread %d wait %s id %s old %s size %d arg %d\n", le.Uint32(op[0:]), le.Uint32(op[4:]),
			dep, id(le.Uint64(op[24:])), id(le.Uint64(op[32:])), le.Uint64(op[40:]), le.Uint64(op[48:]))
	}
	// Thread 1 (101) frees what thread 0 made with its first call;
	// thread 0 frees what thread 1 made with its first. 101's malloc
	// after its thread_done is a thread of its own, 2.
	const want = `kind 1 thread 0 wait - id 0 old - size 100 arg 0
kind 2 thread 0 wait - id 1 old - size 25 arg 4
kind 3 thread 1 wait - id 2 old - size 200 arg 64
kind 5 thread 1 wait 0/1 id 0 old - size 0 arg 0
kind 4 thread 0 wait - id 3 old 1 size 300 arg 0
kind 6 thread 1 wait - id - old - size 0 arg 0
kind 4 thread 0 wait - id - old 3 size 0 arg 0
kind 1 thread 2 wait - id 4 old - size 10 arg 0
kind 5 thread 0 wait 1/1 id 2 old - size 0 arg 0
`
	if got.String() != want {
		t.Errorf("calls:\n%s\nwant:\n%s", got.String(), want)
	}
	if o.count != [replayKinds]uint64{0, 2, 1, 1, 2, 2, 1} || o.unknownFrees != 1 || o.failedInTrace != 1 || o.peakBytes != 500 {
		t.Errorf("counts %v, unknown frees %d, failed %d, peak %d", o.count, o.unknownFrees, o.failedInTrace, o.peakBytes)
	}
}
