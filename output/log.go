package output

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LogTag is the tag of every malloc debug log line.
const LogTag = "malloc_debug"

// Log writes malloc debug messages as logcat prints them in its
// "threadtime" format:
//
//	MM-DD HH:MM:SS.mmm  PID  TID P malloc_debug: MESSAGE
//
// where PID and TID are right-aligned in five columns (longer numbers take
// more) and P is the priority, E for errors and I for information. The time
// is the local time of the clock.
//
// A message that spans several lines becomes one log line per non-empty
// line, each with the same header, as logcat shows a whole backtrace that
// Android logs in one call. A message without any non-empty line is written
// as one line with an empty message.
//
// A Log is safe for concurrent use: the lines of one message reach the
// writer in one Write call, never interleaved with another message's.
// Write errors are ignored, as logging cannot report them anywhere better.
type Log struct {
	*logShared
	tag string
}

// logShared is what a Log shares with the Logs of other tags made from it.
type logShared struct {
	mu    sync.Mutex
	w     io.Writer
	clock func() time.Time
}

// NewLog returns a Log that writes to w and stamps lines with time.Now.
func NewLog(w io.Writer) *Log {
	return &Log{logShared: &logShared{w: w, clock: time.Now}, tag: LogTag}
}

// Tagged returns a Log that writes to the same writer, with the same clock,
// lines of another tag (libmemunreachable's, for one).
func (l *Log) Tagged(tag string) *Log {
	return &Log{logShared: l.logShared, tag: tag}
}

// SetClock replaces the clock that stamps the lines; tests use it to fix
// the time.
func (l *Log) SetClock(clock func() time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock = clock
}

// Errorf logs a message at error priority (E), formatted as fmt.Sprintf
// does, for process pid and thread tid.
func (l *Log) Errorf(pid, tid int, format string, args ...any) {
	l.log('E', pid, tid, fmt.Sprintf(format, args...))
}

// Infof logs a message at information priority (I), formatted as
// fmt.Sprintf does, for process pid and thread tid.
func (l *Log) Infof(pid, tid int, format string, args ...any) {
	l.log('I', pid, tid, fmt.Sprintf(format, args...))
}

func (l *Log) log(prio byte, pid, tid int, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(appendMessage(nil, l.clock(), prio, l.tag, pid, tid, msg))
}

// appendMessage appends the log lines of a message stamped t.
func appendMessage(buf []byte, t time.Time, prio byte, tag string, pid, tid int, msg string) []byte {
	header := appendHeader(nil, t, prio, tag, pid, tid)
	n := len(buf)
	for line := range strings.SplitSeq(msg, "\n") {
		if line == "" {
			continue
		}
		buf = append(buf, header...)
		buf = append(buf, line...)
		buf = append(buf, '\n')
	}
	if len(buf) == n {
		buf = append(append(buf, header...), '\n')
	}
	return buf
}

// logBufferSize is how much a LogBuffer gathers before it writes.
const logBufferSize = 64 << 10

// A LogBuffer gathers the messages of a long report, a leak report of
// thousands of blocks, and hands them to the Log's writer 64 KiB at a time
// instead of one Write call (one system call) per message: 30,000 leaks
// had been 90,000 writes. Each Write holds whole messages, never
// interleaved with another's; messages are stamped as they are added. A
// LogBuffer is for one goroutine; Flush writes what it holds.
type LogBuffer struct {
	l   *Log
	buf []byte
}

// Buffer returns a LogBuffer that writes to l.
func (l *Log) Buffer() *LogBuffer {
	return &LogBuffer{l: l}
}

// Errorf adds a message at error priority (E), as Log.Errorf logs it.
func (b *LogBuffer) Errorf(pid, tid int, format string, args ...any) {
	b.l.mu.Lock()
	now := b.l.clock()
	b.l.mu.Unlock()
	b.buf = appendMessage(b.buf, now, 'E', b.l.tag, pid, tid, fmt.Sprintf(format, args...))
	if len(b.buf) >= logBufferSize {
		b.Flush()
	}
}

// Flush writes the messages gathered.
func (b *LogBuffer) Flush() {
	if len(b.buf) == 0 {
		return
	}
	b.l.mu.Lock()
	_, _ = b.l.w.Write(b.buf)
	b.l.mu.Unlock()
	b.buf = b.buf[:0]
}

// appendHeader appends "MM-DD HH:MM:SS.mmm  PID  TID P TAG: ".
func appendHeader(b []byte, t time.Time, prio byte, tag string, pid, tid int) []byte {
	b = t.AppendFormat(b, "01-02 15:04:05")
	b = append(b, '.')
	b = appendPad(b, strconv.AppendInt(nil, int64(t.Nanosecond()/int(time.Millisecond)), 10), 3, '0')
	b = append(b, ' ')
	b = appendPad(b, strconv.AppendInt(nil, int64(pid), 10), 5, ' ')
	b = append(b, ' ')
	b = appendPad(b, strconv.AppendInt(nil, int64(tid), 10), 5, ' ')
	b = append(b, ' ', prio, ' ')
	b = append(b, tag...)
	b = append(b, ':', ' ')
	return b
}

// appendPad appends s right-aligned in width columns, filled with pad.
func appendPad(b, s []byte, width int, pad byte) []byte {
	for i := len(s); i < width; i++ {
		b = append(b, pad)
	}
	return append(b, s...)
}
