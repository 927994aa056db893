//go:build linux

// Package ctl is the control channel of the shim (shim/ctl.c): the process
// mdtrace launches reaches mdtrace on a unix socket, whose path its
// environment gives in MDSHIM_CTL, to fetch its live allocations for Android's
// get_malloc_leak_info and to pass on Android's malloc debug signals.
//
// A request is 16 bytes, all little endian: u32 magic "mdt1", u32 op,
// u32 arg, u32 0. Op 1 (leak info, arg 0) is answered with a 40-byte header,
// u32 magic, u32 status, u64 overall_size, info_size, total_memory and
// backtrace_size, followed by overall_size bytes: the buffer of
// spec/leak_info_api.md. Op 2 (signal, arg the signal number) is answered
// with the magic alone once mdtrace has acted on it. Each connection
// carries one request, and only a process mdtrace traces, by the pid the kernel gives for the peer (SO_PEERCRED), is served,
// except for op 3 (adopt, arg 0): a fork child that nothing traces, forked
// by a thread of a traced process other than its main one (ptrace reports
// the forks of the threads it traces), asks to be followed and waits for
// the answer, u32 magic and u32 status (0: followed, 2: not). Op 6
// (exiting, arg 0) is the shim's last destructor, which mdtrace answers as a
// signal once it has taken the check for unreachable memory at exit. Ops 4 and 5
// (unreachable, arg a pid) come from another mdtrace, run by root or by
// mdtrace's own user (SO_PEERCRED), which asks for a check for unreachable
// memory of a process this one traces (with each leak's contents for op
// 5): the answer is u32 magic, u32 status (0: done, 3: not traced, 4:
// failed), u64 length and that many bytes of text, libmemunreachable's
// report or why the check failed.
//
// The protocol's numbers and layouts are the shim's too: abi.Ctl*,
// abi.SizeofCtlRequest, abi.SizeofCtlAnswer and their offsets, from
// abi/mdtrace_abi.h.
package ctl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/abi"
)

var (
	// readTimeout bounds the wait for a request; the shim sends it
	// right after connecting.
	readTimeout = 10 * time.Second
	// writeTimeout bounds the sending of an answer; the shim gives up
	// after 30 seconds without progress.
	writeTimeout = 30 * time.Second
)

// Handler carries out the requests of the control channel. Its methods
// may be called from several goroutines at once.
type Handler interface {
	// LeakInfo returns get_malloc_leak_info's answer for process pid:
	// status abi.CtlStatusOK with the buffer and its sizes (as
	// (*leak.Snapshot).LeakInfo gives them; overall must be len(buf)), or
	// abi.CtlStatusNotTracked without the backtrace option.
	LeakInfo(pid int) (status uint32, buf []byte, overall, infoSize, total, btSize uint64)
	// Signal acts on signal sig, received by process pid.
	Signal(pid, sig int)
	// AdoptChild follows process pid, a child that a traced process forked
	// from a thread ptrace does not report, which waits for it; false if
	// it is not followed.
	AdoptChild(pid int) bool
	// Exiting takes the check for unreachable memory at exit of process
	// pid now, from its shim's last destructor, while its threads run.
	Exiting(pid int)
	// Unreachable checks process pid for unreachable memory now, for
	// another mdtrace (mdtrace unreachable): status abi.CtlStatusOK with
	// libmemunreachable's report, each leak with its first bytes if
	// contents is set, abi.CtlStatusNotTraced if pid is not traced, or
	// abi.CtlStatusFailed with the reason.
	Unreachable(pid int, contents bool) (status uint32, text []byte)
	// Refused reports a connection closed without carrying out a request:
	// its peer is not a traced process, its request is malformed or
	// incomplete, or the answer could not be sent. pid is the peer's, 0 if
	// unknown.
	Refused(pid int, reason string)
}

// Server is the listening end of the control channel.
type Server struct {
	dir     string // the private directory that holds the socket
	path    string // the socket's path
	ln      *net.UnixListener
	allowed func(pid int) bool
	h       Handler

	mu     sync.Mutex
	closed bool
	// Refusals are reported at most refuseBurst a refuseWindow: each
	// refusal would be a line of the log. The others are counted, and
	// said in one line.
	windowStart time.Time
	inWindow    int
	unsaid      int
	conns       map[*net.UnixConn]struct{}
	done        chan struct{} // closed by Close
	wg          sync.WaitGroup
	err         error // of closing the listener
}

// socketBases are where the socket's directory is made: /run, which only
// root writes, when it can, else /tmp. They are fixed (not TMPDIR) so that
// the next mdtrace finds the directories of an mdtrace that was killed, and
// short, for a socket's path has at most 107 bytes.
var socketBases = []string{"/run", "/tmp"}

// dirPrefix starts the name of a socket's directory, followed by the pid
// and start time of the mdtrace that made it, and a random part.
const dirPrefix = "mdtrace-ctl-"

// socketName is the name of the socket in its directory.
const socketName = "socket"

// Listen listens on a new unix socket that only root and the current
// effective user can connect to. allowed decides which peers, by pid, are
// served; h carries out the requests. Both are required.
func Listen(allowed func(pid int) bool, h Handler) (*Server, error) {
	return ListenAs(os.Geteuid(), os.Getegid(), allowed, h)
}

// ListenAs listens on a new unix socket that only root and user uid can
// connect to: the socket is owned by uid and gid, mode 0600, in a private
// directory (mode 0711) that Close removes. Directories left by an mdtrace
// that is gone (killed before it could remove its own) are removed first.
//
// The socket's file mode is what keeps other users out: a secret name
// would not, for /proc/net/unix shows every user the path of every bound
// socket. The directory is 0711 rather than 0700 so that a program run as
// another user (-u USER) can reach the socket by its path.
func ListenAs(uid, gid int, allowed func(pid int) bool, h Handler) (*Server, error) {
	if allowed == nil || h == nil {
		return nil, errors.New("control socket: no peer check or no handler")
	}
	me, err := procStart(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	removeStale()
	var dir string
	for _, base := range socketBases {
		// Made 0700, and opened to 0711 once the socket is only its
		// owner's: no other user connects in between.
		if dir, err = os.MkdirTemp(base, fmt.Sprintf("%s%d-%d-", dirPrefix, os.Getpid(), me)); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	path := filepath.Join(dir, socketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err == nil {
		if err = os.Chmod(path, 0o600); err == nil {
			if err = os.Lchown(path, uid, gid); err == nil {
				err = os.Chmod(dir, 0o711)
			}
		}
		if err != nil {
			ln.Close()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("control socket: %w", err)
	}
	s := &Server{
		dir:     dir,
		path:    path,
		ln:      ln,
		allowed: allowed,
		h:       h,
		conns:   make(map[*net.UnixConn]struct{}),
		done:    make(chan struct{}),
	}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// procStart is the start time of process pid, in clock ticks since boot:
// with the pid, it names one process for the life of the system.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces and parentheses:
	// the fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// Field 22, starttime; f[0] is field 3, the state.
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// socketDirs calls fn with each socket directory in the bases, its path,
// and whether the mdtrace that made it still runs: its name gives that
// mdtrace's pid and start time. Names that are not a socket directory's
// are passed over.
func socketDirs(fn func(dir string, running bool)) {
	for _, base := range socketBases {
		entries, err := os.ReadDir(base)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if !strings.HasPrefix(name, dirPrefix) {
				continue
			}
			f := strings.SplitN(strings.TrimPrefix(name, dirPrefix), "-", 3)
			if len(f) != 3 {
				continue
			}
			pid, err1 := strconv.Atoi(f[0])
			start, err2 := strconv.ParseUint(f[1], 10, 64)
			if err1 != nil || err2 != nil || pid <= 0 {
				continue
			}
			now, err := procStart(pid)
			fn(filepath.Join(base, name), err == nil && now == start)
		}
	}
}

// removeStale removes the socket directories of the mdtrace processes that
// are gone: a killed mdtrace cannot remove its own. Only directories owned
// by the current user are touched, and only when the process that their
// name gives (pid and start time) no longer runs.
func removeStale() {
	socketDirs(func(path string, running bool) {
		var st unix.Stat_t
		if running || unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() {
			return
		}
		// RemoveAll does not follow symbolic links, and nobody else
		// can write in a directory of ours.
		os.RemoveAll(path)
	})
}

// Name is the socket's path.
func (s *Server) Name() string { return s.path }

// Dir is the private directory that holds the socket, removed by Close.
func (s *Server) Dir() string { return s.dir }

// Env is the environment entry that tells the shim the socket's path.
func (s *Server) Env() string { return abi.EnvCtl + "=" + s.path }

// Close stops accepting, closes the open connections and waits for their
// handlers to return. It may be called more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
		// Closing the listener removes the socket; the directory goes
		// after it.
		s.err = s.ln.Close()
		if err := os.RemoveAll(s.dir); err != nil && s.err == nil {
			s.err = err
		}
		for c := range s.conns {
			c.Close()
		}
	}
	unsaid := s.unsaid
	s.unsaid = 0
	s.mu.Unlock()
	s.wg.Wait()
	s.sayUnsaid(unsaid)
	return s.err
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) serve() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if s.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, say: wait a little for some to be freed.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-s.done:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(c)
	}
}

// The most refusals reported one by one in a window of time.
var (
	refuseBurst  = 10
	refuseWindow = 10 * time.Second
)

// refuse reports a connection ended early, unless Close ended it; past
// refuseBurst in a refuseWindow, it counts it instead, for the line that
// comes at the start of the next window, or at Close.
func (s *Server) refuse(pid int, format string, args ...any) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	unsaid := 0
	if now.Sub(s.windowStart) >= refuseWindow {
		unsaid, s.unsaid = s.unsaid, 0
		s.windowStart, s.inWindow = now, 0
	}
	s.inWindow++
	say := s.inWindow <= refuseBurst
	if !say {
		s.unsaid++
	}
	s.mu.Unlock()
	s.sayUnsaid(unsaid)
	if say {
		s.h.Refused(pid, fmt.Sprintf(format, args...))
	}
}

// sayUnsaid reports the refusals counted and not reported, if any.
func (s *Server) sayUnsaid(n int) {
	if n > 0 {
		s.h.Refused(0, fmt.Sprintf("control socket: %d more requests refused, not reported one by one (at most %d every %s)", n, refuseBurst, refuseWindow))
	}
}

func (s *Server) handle(c *net.UnixConn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	pid, uid, err := peerCred(c)
	if err != nil {
		s.refuse(0, "control socket: the peer's credentials: %v", err)
		return
	}
	var req [abi.SizeofCtlRequest]byte
	c.SetReadDeadline(time.Now().Add(readTimeout))
	if n, err := io.ReadFull(c, req[:]); err != nil {
		s.refuse(pid, "control socket: process %d sent %d of %d request bytes: %v", pid, n, len(req), err)
		return
	}
	magic := binary.LittleEndian.Uint32(req[abi.OffsetofCtlRequestMagic:])
	op := binary.LittleEndian.Uint32(req[abi.OffsetofCtlRequestOp:])
	arg := binary.LittleEndian.Uint32(req[abi.OffsetofCtlRequestArg:])
	zero := binary.LittleEndian.Uint32(req[abi.OffsetofCtlRequestZero:])
	switch {
	case magic != abi.CtlMagic:
		s.refuse(pid, "control socket: process %d sent a bad magic number %#08x", pid, magic)
	case zero != 0:
		s.refuse(pid, "control socket: process %d sent a bad request (last word %#x)", pid, zero)
	case op == abi.CtlOpAdopt && arg == 0:
		// The peer is not traced yet: its parent must be.
		status := uint32(abi.CtlStatusOK)
		if !s.h.AdoptChild(pid) {
			status = abi.CtlStatusRefused
		}
		c.SetWriteDeadline(time.Now().Add(writeTimeout))
		c.Write(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, abi.CtlMagic), status))
	case op == abi.CtlOpUnreachable || op == abi.CtlOpUnreachableContents:
		// Another mdtrace asks: only root, or mdtrace's own user, may
		// read a traced process's memory this way.
		if uid != 0 && uid != os.Geteuid() {
			s.refuse(pid, "control socket: process %d (uid %d) may not ask for a check for unreachable memory", pid, uid)
			return
		}
		status, text := s.h.Unreachable(int(arg), op == abi.CtlOpUnreachableContents)
		ans := make([]byte, abi.SizeofCtlText, abi.SizeofCtlText+len(text))
		binary.LittleEndian.PutUint32(ans[abi.OffsetofCtlTextMagic:], abi.CtlMagic)
		binary.LittleEndian.PutUint32(ans[abi.OffsetofCtlTextStatus:], status)
		binary.LittleEndian.PutUint64(ans[abi.OffsetofCtlTextLength:], uint64(len(text)))
		ans = append(ans, text...)
		c.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := c.Write(ans); err != nil {
			s.refuse(pid, "control socket: answering process %d: %v", pid, err)
		}
	case !s.allowed(pid):
		s.refuse(pid, "control socket: process %d is not traced", pid)
	case op == abi.CtlOpLeakInfo && arg == 0:
		s.answerLeakInfo(c, pid)
	case op == abi.CtlOpSignal && arg >= 1 && arg <= 64, op == abi.CtlOpExiting && arg == 0:
		if op == abi.CtlOpSignal {
			s.h.Signal(pid, int(arg))
		} else {
			s.h.Exiting(pid)
		}
		// The acknowledgement lets the shim's handler (or destructor)
		// return: what the request asked for is done.
		c.SetWriteDeadline(time.Now().Add(writeTimeout))
		c.Write(binary.LittleEndian.AppendUint32(nil, abi.CtlMagic))
	default:
		s.refuse(pid, "control socket: process %d sent a bad request (op %d, arg %d)", pid, op, arg)
	}
}

func (s *Server) answerLeakInfo(c *net.UnixConn, pid int) {
	status, buf, overall, infoSize, total, btSize := s.h.LeakInfo(pid)
	ans := make([]byte, abi.SizeofCtlAnswer, abi.SizeofCtlAnswer+len(buf))
	binary.LittleEndian.PutUint32(ans[abi.OffsetofCtlAnswerMagic:], abi.CtlMagic)
	binary.LittleEndian.PutUint32(ans[abi.OffsetofCtlAnswerStatus:], status)
	if status == abi.CtlStatusOK {
		if overall != uint64(len(buf)) ||
			overall != 0 && (infoSize == 0 || infoSize != 16+8*btSize || overall%infoSize != 0) {
			s.refuse(pid, "control socket: inconsistent leak info for process %d (buffer of %d bytes, overall_size %d, info_size %d, backtrace_size %d)",
				pid, len(buf), overall, infoSize, btSize)
			return
		}
		binary.LittleEndian.PutUint64(ans[abi.OffsetofCtlAnswerOverallSize:], overall)
		binary.LittleEndian.PutUint64(ans[abi.OffsetofCtlAnswerInfoSize:], infoSize)
		binary.LittleEndian.PutUint64(ans[abi.OffsetofCtlAnswerTotalMemory:], total)
		binary.LittleEndian.PutUint64(ans[abi.OffsetofCtlAnswerBacktraceSize:], btSize)
		ans = append(ans, buf...)
	}
	c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.Write(ans); err != nil {
		s.refuse(pid, "control socket: answering process %d: %v", pid, err)
	}
}

// peerCred is the pid and uid of the process at the other end of c, from
// the kernel's record of the process that connected.
func peerCred(c *net.UnixConn) (pid, uid int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var (
		cred *unix.Ucred
		cerr error
	)
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, cerr
	}
	return int(cred.Pid), int(cred.Uid), nil
}
