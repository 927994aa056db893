package tracer

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"github.com/cilium/ebpf"

	"github.com/mdtrace/mdtrace/bpf"
)

// tableCount estimates how many entries the live table holds without
// reading it: the kernel reports a hash map's memory in its fdinfo
// ("memlock"), which grows by the same number of bytes per entry. The
// bytes of an empty table and of one entry are measured once, at load,
// with an entry no probe makes (process 0, pointer 0).
type tableCount struct {
	empty, perEntry int64 // perEntry 0: no estimate
}

// calibrate measures the table's empty size and the size of an entry.
func (c *tableCount) calibrate(m *ebpf.Map) {
	key := bpf.MdtraceAllocKey{}
	var info bpf.MdtraceAllocInfo
	empty, err := mapMemlock(m)
	if err != nil || m.Update(&key, &info, ebpf.UpdateNoExist) != nil {
		return
	}
	one, err := mapMemlock(m)
	if m.Delete(&key) != nil || err != nil || one <= empty {
		return
	}
	c.empty, c.perEntry = empty, one-empty
}

// estimate returns the number of entries in the table, or false.
func (c *tableCount) estimate(m *ebpf.Map) (int, bool) {
	if c.perEntry == 0 {
		return 0, false
	}
	now, err := mapMemlock(m)
	if err != nil || now < c.empty {
		return 0, false
	}
	return int((now - c.empty) / c.perEntry), true
}

// mapMemlock returns the memory the kernel reports for map m.
func mapMemlock(m *ebpf.Map) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0, err
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("memlock:")); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, fmt.Errorf("no memlock in the fdinfo of map %v", m)
}
