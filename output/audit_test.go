package output

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

func testAudit() *Audit {
	named := func(pcs []uint64) []stacks.Frame {
		fs := make([]stacks.Frame, len(pcs))
		for i, pc := range pcs {
			fs[i] = stacks.Frame{PC: pc, RelPC: pc - 0x1000, MapName: "/usr/bin/server", Func: "_ZN5Cache6insertEv", FuncOff: 4}
		}
		return fs
	}
	return &Audit{
		Elapsed: 61*time.Second + 400*time.Millisecond,
		Processes: []AuditProcess{
			{PID: 10, Comm: "server", Exe: "/usr/bin/server", Cgroup: "/system.slice/server.service", Added: leak.Site{Blocks: 3, Bytes: 3000}, AnonRSS: 5 << 20,
				Sites: []leak.Site{{StackID: 8, Frames: []uint64{0x1100, 0x1200}, Bytes: 2000, Blocks: 2}, {Bytes: 1000, Blocks: 1}}, NSites: 2, Frames: named},
			{PID: 11, Comm: "worker-1", Exe: "/usr/bin/python3.11", Cgroup: "/", Added: leak.Site{Blocks: 2, Bytes: 64}, Exited: true, New: true,
				Sites: []leak.Site{{StackID: 9, Frames: []uint64{0x2100}, Bytes: 64, Blocks: 2}}, NSites: 1,
				Resolved: [][]stacks.Frame{{{PC: 0x2100, RelPC: 0x100, MapName: "/usr/lib/libc.so.6", Func: "strdup", FuncOff: 9}}}},
			{PID: 12, Comm: "sh", Exe: "/usr/bin/dash", Added: leak.Site{Blocks: 1, Bytes: 8}, New: true, AnonRSS: 126976},
		},
		Total:     leak.Site{Blocks: 6, Bytes: 3072},
		Shown:     2,
		Sites:     5,
		Dropped:   1,
		KeptExits: 1000,
		Losses:    []string{"2 allocations not tracked: the live table was full"},
	}
}

func TestWriteAuditText(t *testing.T) {
	var b bytes.Buffer
	if err := WriteAuditText(&b, testAudit()); err != nil {
		t.Fatal(err)
	}
	want := `mdtrace: live heap allocated in the last 1m1s, by process: 3 processes, 6 blocks, 3072 bytes
     PID     BLOCKS          BYTES       ANON RSS  PROGRAM
      10          3           3000        5242880  /usr/bin/server cgroup /system.slice/server.service
      11          2             64              -  /usr/bin/python3.11 (worker-1) [new] [exited]
     ... (1 more)
mdtrace: 1 process that ended during the audit not listed: only the 1000 largest are kept
mdtrace: process 10 (server): 3000 bytes in 3 allocations added, the 2 backtraces with the most bytes of 2:
2000 bytes in 2 allocations:
          #00  pc 0000000000000100  /usr/bin/server (Cache::insert()+4)
          #01  pc 0000000000000200  /usr/bin/server (Cache::insert()+4)
1000 bytes in 1 allocations:
          [no backtrace]
mdtrace: process 11 (worker-1): 64 bytes in 2 allocations added, the 1 backtraces with the most bytes of 1:
64 bytes in 2 allocations:
          #00  pc 0000000000000100  /usr/lib/libc.so.6 (strdup+9)
mdtrace: 2 allocations not tracked: the live table was full
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestWriteAuditJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteAuditJSON(&b, testAudit(), time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2026-11-26T10:00:00Z","elapsed_seconds":61.4,"processes":3,"added_blocks":6,"added_bytes":3072,"ranking":[` +
		`{"pid":10,"comm":"server","exe":"/usr/bin/server","cgroup":"/system.slice/server.service","added_blocks":3,"added_bytes":3000,"exited":false,"new":false,"anon_rss_bytes":5242880,"sites":[` +
		`{"blocks":2,"bytes":2000,"frames":[{"pc":"0x1100","rel_pc":"0x100","file":"/usr/bin/server","function":"Cache::insert()","offset":4},{"pc":"0x1200","rel_pc":"0x200","file":"/usr/bin/server","function":"Cache::insert()","offset":4}]},` +
		`{"blocks":1,"bytes":1000,"frames":[]}],"sites_total":2},` +
		`{"pid":11,"comm":"worker-1","exe":"/usr/bin/python3.11","cgroup":"/","added_blocks":2,"added_bytes":64,"exited":true,"new":true,"sites":[` +
		`{"blocks":2,"bytes":64,"frames":[{"pc":"0x2100","rel_pc":"0x100","file":"/usr/lib/libc.so.6","function":"strdup","offset":9}]}],"sites_total":1},` +
		`{"pid":12,"comm":"sh","exe":"/usr/bin/dash","added_blocks":1,"added_bytes":8,"exited":false,"new":true,"anon_rss_bytes":126976}],` +
		`"exited_not_kept":1,"losses":["2 allocations not tracked: the live table was full"]}` + "\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestWriteAuditSampled: a sampled audit says so under its first line, and
// its JSON gives the interval and each process's blocks in the sample.
func TestWriteAuditSampled(t *testing.T) {
	a := &Audit{
		Elapsed:     2 * time.Second,
		Processes:   []AuditProcess{{PID: 10, Comm: "server", Exe: "/usr/bin/server", Added: leak.Site{Blocks: 24012, Bytes: 13570304}, Sampled: 3100, New: true}},
		Total:       leak.Site{Blocks: 24012, Bytes: 13570304},
		Shown:       25,
		SampleBytes: 4096,
	}
	var b bytes.Buffer
	if err := WriteAuditText(&b, a); err != nil {
		t.Fatal(err)
	}
	want := `mdtrace: live heap allocated in the last 2s, by process: 1 processes, 24012 blocks, 13570304 bytes
mdtrace: sampled one allocation every 4096 bytes on average: block counts and byte totals are estimates, sizes are exact
     PID     BLOCKS          BYTES       ANON RSS  PROGRAM
      10      24012       13570304              0  /usr/bin/server [new]
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := WriteAuditJSON(&b, a, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"time":"2026-01-02T03:04:05Z","elapsed_seconds":2,"processes":1,"added_blocks":24012,"added_bytes":13570304,"ranking":[{"pid":10,"comm":"server","exe":"/usr/bin/server","added_blocks":24012,"added_bytes":13570304,"sampled_blocks":3100,"exited":false,"new":true}],"sample_bytes":4096}
`
	if b.String() != wantJSON {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), wantJSON)
	}
}

// TestWriteAuditTextFolds: the runs of a program that ended are one row of
// the text ranking, at the place of the largest, with its sites; a run in
// another cgroup, and a program that ended once, have rows of their own.
// The JSON lists every process.
func TestWriteAuditTextFolds(t *testing.T) {
	cc1 := func(pid int, bytes uint64, cgroup string) AuditProcess {
		return AuditProcess{PID: pid, Comm: "cc1plus", Exe: "/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", Cgroup: cgroup,
			Added: leak.Site{Blocks: bytes / 100, Bytes: bytes}, Exited: true, New: true}
	}
	a := &Audit{
		Elapsed: 10 * time.Second,
		Processes: []AuditProcess{
			cc1(21, 4000, "/"),
			{PID: 10, Comm: "server", Exe: "/usr/bin/server", Added: leak.Site{Blocks: 3, Bytes: 3000}, AnonRSS: 4096},
			cc1(22, 2500, "/"),
			cc1(30, 2000, "/ci.slice"),
			cc1(23, 1000, "/"),
			{PID: 40, Comm: "sh", Exe: "/usr/bin/dash", Added: leak.Site{Blocks: 1, Bytes: 64}, Exited: true, New: true},
			{PID: 41, Comm: "ended before it was looked at", Added: leak.Site{Blocks: 1, Bytes: 32}, Exited: true},
			{PID: 42, Comm: "ended before it was looked at", Added: leak.Site{Blocks: 1, Bytes: 16}, Exited: true},
		},
		Total: leak.Site{Blocks: 101, Bytes: 12612},
		Shown: 3,
	}
	var b bytes.Buffer
	if err := WriteAuditText(&b, a); err != nil {
		t.Fatal(err)
	}
	want := `mdtrace: live heap allocated in the last 10s, by process: 8 processes, 101 blocks, 12612 bytes
     PID     BLOCKS          BYTES       ANON RSS  PROGRAM
      21         40           4000              -  /usr/lib/gcc/x86_64-linux-gnu/12/cc1plus [new] [exited], the largest of 3 runs of it that ended: 75 blocks, 7500 bytes in all
      10          3           3000           4096  /usr/bin/server
      30         20           2000              -  /usr/lib/gcc/x86_64-linux-gnu/12/cc1plus cgroup /ci.slice [new] [exited]
     ... (3 more)
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	// Processes of unknown files are not folded.
	a.Shown = 10
	b.Reset()
	if err := WriteAuditText(&b, a); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), `
      40          1             64              -  /usr/bin/dash (sh) [new] [exited]
      41          1             32              -  [ended before it was looked at] [exited]
      42          1             16              -  [ended before it was looked at] [exited]
`) {
		t.Errorf("got:\n%s", b.String())
	}
	b.Reset()
	if err := WriteAuditJSON(&b, a, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), `"pid":`); n != 8 {
		t.Errorf("the JSON lists %d processes, want 8:\n%s", n, b.String())
	}
}
