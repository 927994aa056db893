package abi

// Mix64 is mix64 of mdtrace_abi.h: MurmurHash3's 64-bit finalizer.
func Mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// TableBuckets is table_buckets of mdtrace_abi.h: the two buckets of the
// block at ptr of process tgid in a tier of the live table of n buckets
// (n >= 2).
func TableBuckets(ptr uint64, tgid, n uint32) (uint32, uint32) {
	x := ptr ^ uint64(tgid)<<47
	b0 := uint32((x * 0x9e3779b97f4a7c15 >> 32) * uint64(n) >> 32)
	b1 := uint32((x * 0xc2b2ae3d27d4eb4f >> 32) * uint64(n) >> 32)
	if b1 == b0 {
		if b1 = b0 + 1; b1 == n {
			b1 = 0
		}
	}
	return b0, b1
}

// OccMult is occ_mult of mdtrace_abi.h: the multiplier of OccBit for a
// tier of the live table of n buckets (n >= 1).
func OccMult(n uint32) uint64 {
	return uint64(OccBits) << 32 / uint64(n)
}

// OccBit is occ_bit of mdtrace_abi.h: the bit of the occupancy bitmap of
// bucket b of a tier whose multiplier is mult.
func OccBit(b uint32, mult uint64) uint32 {
	return uint32(uint64(b) * mult >> 32)
}
