package output

import (
	"bytes"
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
	_, _ = l.w.Write(appendMessage(nil, appendHeader(nil, l.clock(), prio, l.tag, pid, tid), msg))
}

// appendMessage appends the log lines of a message, each after header.
func appendMessage[S ~string | ~[]byte](buf, header []byte, msg S) []byte {
	n := len(buf)
	for len(msg) > 0 {
		line, rest := msg, msg[len(msg):]
		if i := indexNewline(msg); i >= 0 {
			line, rest = msg[:i], msg[i+1:]
		}
		msg = rest
		if len(line) == 0 {
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

// indexNewline is strings.IndexByte or bytes.IndexByte of '\n' in msg.
func indexNewline[S ~string | ~[]byte](msg S) int {
	switch m := any(msg).(type) {
	case string:
		return strings.IndexByte(m, '\n')
	case []byte:
		return bytes.IndexByte(m, '\n')
	}
	for i := 0; i < len(msg); i++ {
		if msg[i] == '\n' {
			return i
		}
	}
	return -1
}

// logBufferSize is how much a LogBuffer gathers before it writes.
const logBufferSize = 256 << 10

// A LogBuffer gathers the messages of a long report, a leak report of
// thousands of blocks, and hands them to the Log's writer 256 KiB at a time
// instead of one Write call (one system call) per message: 30,000 leaks
// had been 90,000 writes. Each Write holds whole messages, never
// interleaved with another's; messages are stamped as they are added.
// Once it has filled a buffer, a goroutine of its own writes them while
// the next one fills: a report of a million blocks is a gigabyte of lines,
// and writing them took as long as making them. A LogBuffer is for one
// goroutine; Flush writes what it holds, and returns once it is written.
type LogBuffer struct {
	l *Log
	// clock is the Log's when the LogBuffer was made, read without the
	// Log's lock, which its writing goroutine holds while it writes.
	clock func() time.Time
	buf   []byte
	// full takes the buffers to write to the writing goroutine, which
	// gives them back on empty once written, and closes done as it ends;
	// nil while no goroutine is writing.
	full, empty chan []byte
	done        chan struct{}
	// The header of the messages added by Add, and what it was made of:
	// a report of a million blocks has several million lines, and
	// formatting the time of each was a good part of its cost.
	header         []byte
	stamp          int64 // the header's time, in milliseconds
	pid, tid       int
	headerReusable bool
	// headerGen counts the headers made: what was formatted with one
	// header can be used again while it is the same.
	headerGen uint64
}

// logBuffersInFlight is how many buffers a LogBuffer may have: one filling,
// the others written or waiting to be.
const logBuffersInFlight = 3

// Buffer returns a LogBuffer that writes to l.
func (l *Log) Buffer() *LogBuffer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &LogBuffer{l: l, clock: l.clock}
}

// Errorf adds a message at error priority (E), as Log.Errorf logs it.
func (b *LogBuffer) Errorf(pid, tid int, format string, args ...any) {
	now := b.clock()
	b.buf = appendMessage(b.buf, appendHeader(nil, now, 'E', b.l.tag, pid, tid), fmt.Sprintf(format, args...))
	b.spill()
}

// Stamp reads the clock for the messages of process pid and thread tid
// that Add adds until the next Stamp.
func (b *LogBuffer) Stamp(pid, tid int) {
	now := b.clock()
	ms := now.UnixMilli()
	if b.headerReusable && ms == b.stamp && pid == b.pid && tid == b.tid {
		return
	}
	b.header = appendHeader(b.header[:0], now, 'E', b.l.tag, pid, tid)
	b.stamp, b.pid, b.tid, b.headerReusable = ms, pid, tid, true
	b.headerGen++
}

// addLines adds log lines made with the header of the last Stamp.
func (b *LogBuffer) addLines(lines []byte) {
	b.buf = append(b.buf, lines...)
	b.spill()
}

// Add adds a message at error priority, as Errorf with "%s" does, stamped
// as the last Stamp said.
func (b *LogBuffer) Add(msg string) {
	b.buf = appendMessage(b.buf, b.header, msg)
	b.spill()
}

// AddBytes is Add of a message in bytes.
func (b *LogBuffer) AddBytes(msg []byte) {
	b.buf = appendMessage(b.buf, b.header, msg)
	b.spill()
}

// spill hands a full buffer to the writing goroutine, started the first
// time, and takes an empty one.
func (b *LogBuffer) spill() {
	if len(b.buf) < logBufferSize {
		return
	}
	if b.full == nil {
		b.full = make(chan []byte, logBuffersInFlight)
		b.empty = make(chan []byte, logBuffersInFlight)
		b.done = make(chan struct{})
		for range logBuffersInFlight - 1 {
			b.empty <- make([]byte, 0, logBufferSize+logBufferSize/4)
		}
		go func(full <-chan []byte, empty chan<- []byte, done chan<- struct{}) {
			defer close(done)
			for buf := range full {
				b.l.mu.Lock()
				_, _ = b.l.w.Write(buf)
				b.l.mu.Unlock()
				empty <- buf[:0]
			}
		}(b.full, b.empty, b.done)
	}
	b.full <- b.buf
	b.buf = <-b.empty
}

// Flush writes the messages gathered, and returns once they are written.
func (b *LogBuffer) Flush() {
	if b.full != nil {
		if len(b.buf) > 0 {
			b.full <- b.buf
		}
		close(b.full)
		<-b.done
		b.full, b.empty, b.done, b.buf = nil, nil, nil, nil
		return
	}
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
