package leak

import "encoding/binary"

// ZygoteBit is the bit that get_malloc_leak_info sets in an entry's size
// for an allocation of a zygote child.
const ZygoteBit = 1 << 31

// LeakInfo builds the buffer that Android's get_malloc_leak_info returns
// (spec/leak_info_api.md) for a 64-bit little-endian process, from
// s.UniqueList(true).
//
// Each entry is infoSize = 16 + 8*BacktraceSize bytes: the size with
// ZygoteBit set for zygote-child allocations, the number of allocations,
// and BacktraceSize frames padded with zeros. overall is the size of buf,
// total is TotalMemory of the records, and btSize is s.BacktraceSize. When
// no allocation qualifies, every result is zero and buf is nil, as in
// Android.
func (s *Snapshot) LeakInfo() (buf []byte, overall, infoSize, total, btSize uint64) {
	recs := s.UniqueList(true)
	if len(recs) == 0 {
		return nil, 0, 0, 0, 0
	}
	frames := max(s.BacktraceSize, 0)
	btSize = uint64(frames)
	infoSize = 16 + 8*btSize
	overall = infoSize * uint64(len(recs))
	buf = make([]byte, overall)
	for i, r := range recs {
		e := buf[uint64(i)*infoSize:]
		size := r.Size
		if r.Zygote {
			size |= ZygoteBit
		}
		binary.LittleEndian.PutUint64(e[0:], size)
		binary.LittleEndian.PutUint64(e[8:], r.Num)
		for j, pc := range r.Frames {
			if j >= frames {
				break
			}
			binary.LittleEndian.PutUint64(e[16+8*j:], pc)
		}
	}
	return buf, overall, infoSize, TotalMemory(recs), btSize
}
