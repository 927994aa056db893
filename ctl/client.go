//go:build linux

package ctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/abi"
)

// ErrNotTraced is the error of AskUnreachable when no running mdtrace
// traces the process.
var ErrNotTraced = errors.New("no running mdtrace traces it")

// maxText bounds the text of an answer: a report of at most 100 leaks,
// each with its contents and a backtrace of up to 256 frames, is far
// smaller.
const maxText = 64 << 20

// AskUnreachable asks the running mdtrace that traces process pid to
// check it for unreachable memory now, and returns libmemunreachable's
// report, each leak with its first bytes if contents is set. Every
// mdtrace's control socket is asked in turn (a handful at most), until
// one traces pid; timeout bounds the wait for each answer, the check
// included. It returns ErrNotTraced when none does.
//
// Only the sockets of running mdtrace processes, in directories owned by
// root or by the caller, are asked: a directory that another user made
// in /tmp under the same name is not mdtrace's.
func AskUnreachable(pid int, contents bool, timeout time.Duration) ([]byte, error) {
	op := uint32(abi.CtlOpUnreachable)
	if contents {
		op = abi.CtlOpUnreachableContents
	}
	var errs []error
	for _, path := range servers() {
		text, status, err := askText(path, op, uint32(pid), timeout)
		switch {
		case err != nil:
			// An mdtrace that cannot answer (one that predates the
			// request closes the connection): the next.
			errs = append(errs, err)
		case status == abi.CtlStatusOK:
			return text, nil
		case status == abi.CtlStatusFailed:
			return nil, fmt.Errorf("process %d: the check failed: %s", pid, text)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("process %d: %w (%w)", pid, ErrNotTraced, errors.Join(errs...))
	}
	return nil, fmt.Errorf("process %d: %w", pid, ErrNotTraced)
}

// servers lists the control sockets of the mdtrace processes running now,
// in directories of root's or of the current user's.
func servers() []string {
	var out []string
	socketDirs(func(dir string, running bool) {
		var st unix.Stat_t
		if !running || unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR ||
			st.Uid != 0 && int(st.Uid) != os.Geteuid() {
			return
		}
		out = append(out, filepath.Join(dir, socketName))
	})
	return out
}

// askText sends one request to the socket at path and reads an answer of
// struct md_ctl_text.
func askText(path string, op, arg uint32, timeout time.Duration) (text []byte, status uint32, err error) {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	req := make([]byte, abi.SizeofCtlRequest)
	binary.LittleEndian.PutUint32(req[abi.OffsetofCtlRequestMagic:], abi.CtlMagic)
	binary.LittleEndian.PutUint32(req[abi.OffsetofCtlRequestOp:], op)
	binary.LittleEndian.PutUint32(req[abi.OffsetofCtlRequestArg:], arg)
	if _, err := c.Write(req); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	var hdr [abi.SizeofCtlText]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, 0, fmt.Errorf("%s: no answer: %w", path, err)
	}
	if m := binary.LittleEndian.Uint32(hdr[abi.OffsetofCtlTextMagic:]); m != abi.CtlMagic {
		return nil, 0, fmt.Errorf("%s: a bad magic number %#08x in the answer", path, m)
	}
	status = binary.LittleEndian.Uint32(hdr[abi.OffsetofCtlTextStatus:])
	n := binary.LittleEndian.Uint64(hdr[abi.OffsetofCtlTextLength:])
	if n > maxText {
		return nil, 0, fmt.Errorf("%s: an answer of %d bytes", path, n)
	}
	text = make([]byte, n)
	if _, err := io.ReadFull(c, text); err != nil {
		return nil, 0, fmt.Errorf("%s: the answer cut short: %w", path, err)
	}
	return text, status, nil
}
