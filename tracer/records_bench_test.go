//go:build linux

package tracer

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/output"
)

// recordSource is a BPF program that sends one record_allocs record to the
// probes' records ring buffer each time it runs, as the probes do: a malloc
// or a free (at random) by thread 4242 of process 4242, of a random pointer
// in a heap, of a size from 1 to 4096, with the times of the call.
func recordSource(tb testing.TB, p *Probes) *ebpf.Program {
	tb.Helper()
	const ev = -72 // struct record_event on the stack
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.SocketFilter,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.FnKtimeGetNs.Call(),
			asm.StoreMem(asm.RFP, ev+0, asm.R0, asm.DWord), // start_ns
			asm.Add.Imm(asm.R0, 700),
			asm.StoreMem(asm.RFP, ev+8, asm.R0, asm.DWord), // end_ns
			asm.FnGetPrandomU32.Call(),
			asm.Mov.Reg(asm.R6, asm.R0),
			asm.LSh.Imm(asm.R0, 4),
			asm.LoadImm(asm.R1, 0x55d000000000, asm.DWord),
			asm.Add.Reg(asm.R0, asm.R1),
			asm.StoreMem(asm.RFP, ev+16, asm.R0, asm.DWord), // ptr
			asm.Mov.Reg(asm.R0, asm.R6),
			asm.RSh.Imm(asm.R0, 20),
			asm.Add.Imm(asm.R0, 1),
			asm.StoreMem(asm.RFP, ev+24, asm.R0, asm.DWord), // size
			asm.Mov.Imm(asm.R0, 0),
			asm.StoreMem(asm.RFP, ev+32, asm.R0, asm.DWord), // arg
			asm.StoreMem(asm.RFP, ev+40, asm.R0, asm.DWord), // present
			asm.StoreMem(asm.RFP, ev+48, asm.R0, asm.DWord), // stack_id
			asm.StoreImm(asm.RFP, ev+56, 4242, asm.Word),    // tid
			asm.Mov.Reg(asm.R0, asm.R6),
			asm.And.Imm(asm.R0, 1),
			asm.Mul.Imm(asm.R0, abi.RecordFree-abi.RecordMalloc),
			asm.Add.Imm(asm.R0, abi.RecordMalloc),
			asm.StoreMem(asm.RFP, ev+60, asm.R0, asm.Word), // type
			asm.StoreImm(asm.RFP, ev+64, 4242, asm.Word),   // tgid
			asm.StoreImm(asm.RFP, ev+68, 0, asm.Word),      // pad
			asm.LoadMapPtr(asm.R1, p.objs.Records.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, ev),
			asm.Mov.Imm(asm.R3, 72),
			asm.Mov.Imm(asm.R4, 1), // BPF_RB_NO_WAKEUP
			asm.FnRingbufOutput.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		tb.Fatalf("loading the record source: %v", err)
	}
	return prog
}

// sendRecords runs the record source n times (at least).
func sendRecords(tb testing.TB, prog *ebpf.Program, n int) {
	tb.Helper()
	if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 14), Repeat: uint32(n)}); err != nil {
		tb.Fatalf("sending records: %v", err)
	}
}

// recordProbes loads the probes with record_allocs and its 32 MiB ring
// buffer, a record source and a reader.
func recordProbes(tb testing.TB) (*Probes, *ebpf.Program, *EventReader[Record]) {
	tb.Helper()
	needBPF(tb)
	p, err := LoadProbes(ProbeConfig{Record: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	prog := recordSource(tb, p)
	tb.Cleanup(func() { prog.Close() })
	rd, err := p.Records()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rd.Close() })
	return p, prog, rd
}

// BenchmarkRecordStream reads record_allocs records from the probes'
// ring buffer, one operation per record: "read" decodes it
// (EventReader.Next, with the deadline the recorder's pump sets each
// time), "read+line" also converts it and writes its line with a
// RecordWriter. The ring buffer is refilled, timer stopped, whenever it is
// empty.
func BenchmarkRecordStream(b *testing.B) {
	_, prog, rd := recordProbes(b)
	for _, mode := range []string{"read", "read+line"} {
		b.Run(mode, func(b *testing.B) {
			var (
				ev  Record
				rec output.Record
				w   = output.NewRecordWriter(io.Discard)
			)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				err := rd.Next(time.Now(), &ev)
				for errors.Is(err, ErrNoRecord) {
					b.StopTimer()
					sendRecords(b, prog, min(b.N-i, 400_000))
					b.StartTimer()
					err = rd.Next(time.Now(), &ev)
				}
				if err != nil {
					b.Fatal(err)
				}
				if mode == "read+line" {
					rec = OutputRecord(&ev)
					if err := w.Write(&rec); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			// Leave the ring buffer empty for the next mode.
			for rd.Next(time.Now(), &ev) == nil {
			}
		})
	}
}

// TestPerEventAllocs checks that the per-event paths allocate nothing:
// decoding a record from the ring buffer, converting it and writing its
// line, and, per entry, reading the live table. It logs what Probes.Stack
// allocates per lookup.
func TestPerEventAllocs(t *testing.T) {
	_, prog, rd := recordProbes(t)
	const runs = 20000
	sendRecords(t, prog, runs+1000)
	var (
		ev  Record
		rec output.Record
		w   = output.NewRecordWriter(io.Discard)
	)
	if n := testing.AllocsPerRun(runs, func() {
		if err := rd.Next(time.Now(), &ev); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("EventReader.Next: %v allocations per record, want 0", n)
	}
	if n := testing.AllocsPerRun(500, func() {
		if err := rd.Next(time.Now(), &ev); err != nil {
			t.Fatal(err)
		}
		rec = OutputRecord(&ev)
		if err := w.Write(&rec); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("decoding and writing a record: %v allocations per record, want 0", n)
	}

	p := smallTable(t)
	const entries = 50000
	ids := fillTable(t, p, tableFill{tgid: fakeTgid, allocs: entries, stacks: 500, seed: 4})
	var seen int
	// The walk allocates its batch buffers, not per entry.
	if n := testing.AllocsPerRun(3, func() {
		seen = 0
		if err := p.eachAlloc(func(*bpf.MdtraceAllocKey, *bpf.MdtraceAllocInfo) { seen++ }); err != nil {
			t.Fatal(err)
		}
	}); n > entries/1000 || seen != entries {
		t.Errorf("reading %d entries of the live table: %v allocations, %d entries, want at most %d allocations", entries, n, seen, entries/1000)
	}
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		if p.Stack(ids[i%len(ids)]) == nil {
			t.Fatal("no stack")
		}
		i++
	})
	// Not a per-allocation path (verify_pointers errors, and once per
	// unique backtrace in Snapshot), and the frames it returns are new.
	t.Logf("Probes.Stack: %v allocations per lookup", n)
}
