//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Uprobe sessions (Linux 6.13): one link runs alloc_session at the entry
// of each allocator function and at its return, unless the entry says it
// needs none (bpf/mdtrace.bpf.c). cilium/ebpf makes uprobe_multi links of
// the entry or the return kind only, so the link is made here.

// The kernel's numbers: the BPF_LINK_CREATE command and the attach type
// BPF_TRACE_UPROBE_SESSION.
const (
	bpfLinkCreate         = 28
	bpfTraceUprobeSession = 57
)

// linkCreateUprobeMulti is the uprobe_multi part of union bpf_attr for
// BPF_LINK_CREATE.
type linkCreateUprobeMulti struct {
	progFD     uint32
	targetFD   uint32
	attachType uint32
	flags      uint32
	path       uint64
	offsets    uint64
	refCtrs    uint64
	cookies    uint64
	cnt        uint32
	umFlags    uint32
	pid        uint32
	_          uint32
}

// uprobeSessionLink attaches prog, a uprobe session program, at offsets of
// the file at path, each with its cookie, for process pid (0: every one).
func uprobeSessionLink(path string, prog *ebpf.Program, offsets, cookies []uint64, pid uint32) (link.Link, error) {
	if len(offsets) == 0 || len(cookies) != len(offsets) {
		return nil, errors.New("a uprobe session link needs one cookie for each of its offsets")
	}
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return nil, err
	}
	attr := linkCreateUprobeMulti{
		progFD:     uint32(prog.FD()),
		attachType: bpfTraceUprobeSession,
		path:       uint64(uintptr(unsafe.Pointer(p))),
		offsets:    uint64(uintptr(unsafe.Pointer(&offsets[0]))),
		cookies:    uint64(uintptr(unsafe.Pointer(&cookies[0]))),
		cnt:        uint32(len(offsets)),
		pid:        pid,
	}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(p)
	runtime.KeepAlive(offsets)
	runtime.KeepAlive(cookies)
	if errno != 0 {
		return nil, errno
	}
	l, err := link.NewFromFD(int(fd))
	if err != nil {
		unix.Close(int(fd))
		return nil, fmt.Errorf("the uprobe session link: %w", err)
	}
	return l, nil
}

// sessions says whether the allocator's probes are made as uprobe
// sessions: the program loaded, and no link refused yet.
func (p *Probes) sessions() bool {
	return p.objs.AllocSession != nil && !p.noSessions.Load()
}

// Sessions reports whether the allocator's entry and return probes are
// made as uprobe sessions, which skip the return probes not needed.
func (p *Probes) Sessions() bool { return p.sessions() }

// sessionRefused says whether a session link's error is the kernel's not
// having uprobe sessions (before 6.13: an attach type it does not know),
// after which the entry and return probes are made apart.
func sessionRefused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.Errno(524)) // ENOTSUPP
}
