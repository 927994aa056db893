package output

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixedClock is 04-15 12:35:33.304 (and a bit more, which must not round).
func fixedClock() time.Time {
	return time.Date(2025, time.April, 15, 12, 35, 33, 304_999_999, time.UTC)
}

func TestLog(t *testing.T) {
	tests := []struct {
		name string
		log  func(l *Log)
		want string
	}{
		{
			name: "error 4-digit pid",
			log: func(l *Log) {
				l.Errorf(7412, 7412, "+++ %s leaked block of size %d at 0x%x (leak %d of %d)", "APP", 100, 0x2be3b0b0, 1, 2)
			},
			want: "04-15 12:35:33.304  7412  7412 E malloc_debug: +++ APP leaked block of size 100 at 0x2be3b0b0 (leak 1 of 2)\n",
		},
		{
			name: "info",
			log:  func(l *Log) { l.Infof(7412, 7413, "%s: malloc debug enabled", "/usr/bin/app") },
			want: "04-15 12:35:33.304  7412  7413 I malloc_debug: /usr/bin/app: malloc debug enabled\n",
		},
		{
			name: "5-digit pid",
			log:  func(l *Log) { l.Errorf(31415, 31416, "x") },
			want: "04-15 12:35:33.304 31415 31416 E malloc_debug: x\n",
		},
		{
			name: "7-digit pid",
			log:  func(l *Log) { l.Errorf(4194304, 4194305, "x") },
			want: "04-15 12:35:33.304 4194304 4194305 E malloc_debug: x\n",
		},
		{
			name: "short pid",
			log:  func(l *Log) { l.Infof(1, 12, "x") },
			want: "04-15 12:35:33.304     1    12 I malloc_debug: x\n",
		},
		{
			name: "multi-line",
			log: func(l *Log) {
				l.Errorf(7412, 7412, "%s", "          #00  pc 0000000000001000  <unknown>\n          #01  pc 0000000000002000  /lib/a.so (f+1)\n")
			},
			want: "04-15 12:35:33.304  7412  7412 E malloc_debug:           #00  pc 0000000000001000  <unknown>\n" +
				"04-15 12:35:33.304  7412  7412 E malloc_debug:           #01  pc 0000000000002000  /lib/a.so (f+1)\n",
		},
		{
			// Android's "Dumping to file: %s\n" ends in a newline that
			// logcat does not show as a line of its own.
			name: "empty lines dropped",
			log:  func(l *Log) { l.Errorf(7412, 7412, "\nDumping to file: %s\n\n", "/tmp/backtrace_heap.7412.txt") },
			want: "04-15 12:35:33.304  7412  7412 E malloc_debug: Dumping to file: /tmp/backtrace_heap.7412.txt\n",
		},
		{
			name: "empty message",
			log:  func(l *Log) { l.Infof(7412, 7412, "") },
			want: "04-15 12:35:33.304  7412  7412 I malloc_debug: \n",
		},
		{
			name: "percent kept",
			log:  func(l *Log) { l.Infof(7412, 7412, "%s", "100%d") },
			want: "04-15 12:35:33.304  7412  7412 I malloc_debug: 100%d\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := NewLog(&buf)
			l.SetClock(fixedClock)
			tt.log(l)
			if buf.String() != tt.want {
				t.Errorf("got\n%q\nwant\n%q", buf.String(), tt.want)
			}
		})
	}
}

func TestLogMillisecondsPadded(t *testing.T) {
	var buf bytes.Buffer
	l := NewLog(&buf)
	l.SetClock(func() time.Time { return time.Date(2025, time.January, 2, 3, 4, 5, 7_000_000, time.UTC) })
	l.Infof(1, 1, "x")
	if want := "01-02 03:04:05.007     1     1 I malloc_debug: x\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

// writeCounter records each Write call separately.
type writeCounter struct {
	mu     sync.Mutex
	writes []string
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// TestLogConcurrent checks that each message reaches the writer whole, in
// one Write call.
func TestLogConcurrent(t *testing.T) {
	w := &writeCounter{}
	l := NewLog(w)
	l.SetClock(fixedClock)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				l.Errorf(100+g, 100+g, "a%d-%d\nb%d-%d", g, i, g, i)
			}
		})
	}
	wg.Wait()
	if len(w.writes) != 8*50 {
		t.Fatalf("%d writes, want %d", len(w.writes), 8*50)
	}
	for _, s := range w.writes {
		lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("write %q has %d lines, want 2", s, len(lines))
		}
		var g, i int
		if _, err := fmt.Sscanf(lines[0][strings.LastIndex(lines[0], " ")+1:], "a%d-%d", &g, &i); err != nil {
			t.Fatalf("line %q: %v", lines[0], err)
		}
		if want := fmt.Sprintf("b%d-%d", g, i); !strings.HasSuffix(lines[1], " "+want) {
			t.Errorf("write %q: second line does not match the first", s)
		}
	}
}

// recordingWriter keeps what it is given and where each Write ended.
type recordingWriter struct {
	bytes.Buffer
	ends []int
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	w.ends = append(w.ends, w.Len())
	return n, err
}

// TestLogBuffer: a LogBuffer writes the same lines as the Log would, by
// Errorf or by Stamp and Add, in one write per 256 KiB, and a message is
// never split between two writes.
func TestLogBuffer(t *testing.T) {
	var direct, buffered recordingWriter
	dl, bl := NewLog(&direct), NewLog(&buffered)
	dl.SetClock(fixedClock)
	bl.SetClock(fixedClock)
	b := bl.Buffer()
	const n = 5000
	for i := range n {
		msg := fmt.Sprintf("+++ leaked block %d\nBacktrace at time of allocation:\n          #00  pc %016x  /lib/x.so (f+%d)", i, i*16, i)
		dl.Errorf(10, 11, "%s", msg)
		switch i % 3 {
		case 0:
			b.Errorf(10, 11, "%s", msg)
		case 1:
			b.Stamp(10, 11)
			b.Add(msg)
		default:
			b.Stamp(10, 11)
			b.AddBytes([]byte(msg))
		}
	}
	b.Flush()
	b.Flush() // nothing more to write
	if len(buffered.ends) < 2 {
		t.Errorf("buffered: %d writes of %d bytes, want them in pieces", len(buffered.ends), buffered.Len())
	}
	if buffered.String() != direct.String() {
		t.Fatal("the buffered log differs from the direct one")
	}
	if len(direct.ends) != n {
		t.Errorf("direct: %d writes, want %d", len(direct.ends), n)
	}
	if most := buffered.Len()/logBufferSize + 1; len(buffered.ends) > most {
		t.Errorf("buffered: %d writes for %d bytes, want at most %d", len(buffered.ends), buffered.Len(), most)
	}
	// Every write ends with a message's last line, its frame.
	out := buffered.String()
	for _, e := range buffered.ends {
		start := strings.LastIndexByte(out[:e-1], '\n') + 1
		if line := out[start:e]; !strings.Contains(line, "#00  pc ") {
			t.Fatalf("a write ends inside a message, after %q", line)
		}
	}
}
