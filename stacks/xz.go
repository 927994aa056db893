package stacks

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// The xz container (https://tukaani.org/xz/xz-file-format.txt) is parsed
// here rather than by xz.Reader so that nothing is allocated from sizes the
// input claims before they are checked: the index gives the size of every
// block before any is decoded, and the LZMA2 dictionary is never larger than
// the block it decodes, whatever the block header asks for.

// xzMagic starts an xz stream header; xzFooterMagic ends a stream footer.
var (
	xzMagic       = []byte{0xfd, '7', 'z', 'X', 'Z', 0}
	xzFooterMagic = []byte{'Y', 'Z'}
)

// xzFilterLZMA2 is the filter ID of LZMA2, the only filter unxz accepts.
const xzFilterLZMA2 = 0x21

// errXZ is wrapped by every error of unxz about a malformed stream.
var errXZ = errors.New("malformed xz stream")

// xzCRC64 is the CRC-64 table of the xz format (ECMA-182).
var xzCRC64 = crc64.MakeTable(crc64.ECMA)

// unxz decompresses data, one xz stream optionally followed by stream
// padding, and returns its content. It fails without decoding anything if
// the stream's index says the content is larger than limit bytes, and it
// never holds more than about twice limit bytes. Only streams whose blocks
// use the LZMA2 filter alone are accepted, as xz(1) writes them by default.
func unxz(data []byte, limit int64) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("%w: %v", errXZ, p)
		}
	}()
	for len(data) >= 4 && binary.LittleEndian.Uint32(data[len(data)-4:]) == 0 {
		data = data[:len(data)-4] // stream padding
	}
	if len(data) < 32 || !bytes.Equal(data[:6], xzMagic) {
		return nil, fmt.Errorf("%w: no stream header", errXZ)
	}
	flags := data[6:8]
	if flags[0] != 0 || flags[1]&0xf0 != 0 || crc32.ChecksumIEEE(flags) != binary.LittleEndian.Uint32(data[8:12]) {
		return nil, fmt.Errorf("%w: bad stream flags", errXZ)
	}
	checkType := flags[1]
	checkSize := xzCheckSize(checkType)

	footer := data[len(data)-12:]
	if !bytes.Equal(footer[10:], xzFooterMagic) || !bytes.Equal(footer[8:10], flags) ||
		crc32.ChecksumIEEE(footer[4:10]) != binary.LittleEndian.Uint32(footer[:4]) {
		return nil, fmt.Errorf("%w: bad stream footer", errXZ)
	}
	indexSize := (int64(binary.LittleEndian.Uint32(footer[4:8])) + 1) * 4
	indexStart := int64(len(data)) - 12 - indexSize
	if indexStart < 12 {
		return nil, fmt.Errorf("%w: index larger than the stream", errXZ)
	}
	records, err := xzIndex(data[indexStart : len(data)-12])
	if err != nil {
		return nil, err
	}

	var total, blocks int64
	for _, r := range records {
		total += r.uncompressed
		blocks += (r.unpadded + 3) &^ 3
		if total > limit || total < 0 {
			return nil, fmt.Errorf("xz stream holds more than %d bytes", limit)
		}
		if blocks > indexStart-12 || blocks < 0 {
			break
		}
	}
	if blocks != indexStart-12 {
		return nil, fmt.Errorf("%w: the index does not match the blocks", errXZ)
	}
	out = make([]byte, 0, total)
	pos := int64(12)
	for i, r := range records {
		padded := (r.unpadded + 3) &^ 3
		block := data[pos : pos+padded]
		pos += padded
		if out, err = xzBlock(block, r.unpadded, out, r.uncompressed, checkType, checkSize); err != nil {
			return nil, fmt.Errorf("xz block %d: %w", i, err)
		}
	}
	return out, nil
}

// xzCheckSize returns the size of the integrity check of the given type.
func xzCheckSize(t byte) int64 {
	if t == 0 {
		return 0
	}
	return 4 << ((t - 1) / 3)
}

// xzRecord is one index record: the size of a block without its padding,
// and the size of its content.
type xzRecord struct {
	unpadded, uncompressed int64
}

// xzIndex parses the index of an xz stream.
func xzIndex(idx []byte) ([]xzRecord, error) {
	if len(idx) < 8 || idx[0] != 0 ||
		crc32.ChecksumIEEE(idx[:len(idx)-4]) != binary.LittleEndian.Uint32(idx[len(idx)-4:]) {
		return nil, fmt.Errorf("%w: bad index", errXZ)
	}
	body := idx[1 : len(idx)-4]
	n, body, err := xzVarint(body)
	if err != nil {
		return nil, err
	}
	if n > uint64(len(body))/2 {
		return nil, fmt.Errorf("%w: index claims %d records", errXZ, n)
	}
	records := make([]xzRecord, n)
	for i := range records {
		var u, c uint64
		if u, body, err = xzVarint(body); err != nil {
			return nil, err
		}
		if c, body, err = xzVarint(body); err != nil {
			return nil, err
		}
		if u == 0 || u > 1<<62 || c > 1<<62 {
			return nil, fmt.Errorf("%w: bad index record", errXZ)
		}
		records[i] = xzRecord{unpadded: int64(u), uncompressed: int64(c)}
	}
	if len(body) > 3 || bytes.Count(body, []byte{0}) != len(body) {
		return nil, fmt.Errorf("%w: bad index padding", errXZ)
	}
	return records, nil
}

// xzVarint decodes one xz multibyte integer from the start of b.
func xzVarint(b []byte) (uint64, []byte, error) {
	var v uint64
	for i := 0; i < 9 && i < len(b); i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if i > 0 && b[i] == 0 {
				return 0, nil, fmt.Errorf("%w: overlong integer", errXZ)
			}
			return v, b[i+1:], nil
		}
	}
	return 0, nil, fmt.Errorf("%w: bad integer", errXZ)
}

// xzBlock decodes one block, with its padding, of which the index says it
// is unpadded bytes long without the padding and holds size bytes, and
// appends them to out.
func xzBlock(block []byte, unpadded int64, out []byte, size int64, checkType byte, checkSize int64) ([]byte, error) {
	if len(block) == 0 || block[0] == 0 {
		return nil, fmt.Errorf("%w: no block header", errXZ)
	}
	hsize := (int64(block[0]) + 1) * 4
	if hsize+checkSize > unpadded {
		return nil, fmt.Errorf("%w: block shorter than its header", errXZ)
	}
	// The compressed data is followed by up to 3 bytes of zeros, then the
	// check.
	compressed := block[hsize : unpadded-checkSize]
	padding := block[unpadded-checkSize : int64(len(block))-checkSize]
	check := block[int64(len(block))-checkSize:]
	if bytes.Count(padding, []byte{0}) != len(padding) {
		return nil, fmt.Errorf("%w: bad block padding", errXZ)
	}
	hdr := block[:hsize]
	if crc32.ChecksumIEEE(hdr[:hsize-4]) != binary.LittleEndian.Uint32(hdr[hsize-4:]) {
		return nil, fmt.Errorf("%w: bad block header checksum", errXZ)
	}
	flags := hdr[1]
	if flags&0x3c != 0 {
		return nil, fmt.Errorf("%w: unsupported block flags %#x", errXZ, flags)
	}
	p := hdr[2 : hsize-4]
	var err error
	if flags&0x40 != 0 {
		var c uint64
		if c, p, err = xzVarint(p); err != nil {
			return nil, err
		}
		if c != uint64(len(compressed)) {
			return nil, fmt.Errorf("%w: block sizes disagree", errXZ)
		}
	}
	if flags&0x80 != 0 {
		var u uint64
		if u, p, err = xzVarint(p); err != nil {
			return nil, err
		}
		if u != uint64(size) {
			return nil, fmt.Errorf("%w: block sizes disagree", errXZ)
		}
	}
	if flags&3 != 0 {
		return nil, errors.New("unsupported xz filter chain: only LZMA2 alone is accepted")
	}
	id, p, err := xzVarint(p)
	if err != nil {
		return nil, err
	}
	propSize, p, err := xzVarint(p)
	if err != nil {
		return nil, err
	}
	if id != xzFilterLZMA2 || propSize != 1 || len(p) < 1 || p[0] > 40 {
		return nil, fmt.Errorf("unsupported xz filter %#x", id)
	}
	if bytes.Count(p[1:], []byte{0}) != len(p[1:]) {
		return nil, fmt.Errorf("%w: bad block header padding", errXZ)
	}
	// The dictionary never needs to be larger than what it decodes; a
	// larger one, as the header may ask for, is not allocated.
	dictCap := min(lzma2DictSize(p[0]), size)
	dictCap = max(dictCap, lzma.MinDictCap)
	r, err := lzma.Reader2Config{DictCap: int(dictCap)}.NewReader2(bytes.NewReader(compressed))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errXZ, err)
	}
	start := len(out)
	out = out[:start+int(size)]
	if _, err := io.ReadFull(r, out[start:]); err != nil {
		return nil, fmt.Errorf("%w: %v", errXZ, err)
	}
	var one [1]byte
	if n, err := io.ReadFull(r, one[:]); n != 0 || err != io.EOF {
		return nil, fmt.Errorf("%w: block larger than the index says", errXZ)
	}
	content := out[start:]
	switch checkType {
	case 0:
	case 1:
		if crc32.ChecksumIEEE(content) != binary.LittleEndian.Uint32(check) {
			return nil, fmt.Errorf("%w: CRC32 mismatch", errXZ)
		}
	case 4:
		if crc64.Checksum(content, xzCRC64) != binary.LittleEndian.Uint64(check) {
			return nil, fmt.Errorf("%w: CRC64 mismatch", errXZ)
		}
	case 10:
		if sum := sha256.Sum256(content); !bytes.Equal(sum[:], check) {
			return nil, fmt.Errorf("%w: SHA-256 mismatch", errXZ)
		}
	default:
		return nil, fmt.Errorf("unsupported xz check type %d", checkType)
	}
	return out, nil
}

// lzma2DictSize decodes the dictionary size byte of the LZMA2 filter
// properties (at most 40).
func lzma2DictSize(b byte) int64 {
	if b == 40 {
		return 0xffffffff
	}
	return int64(2|b&1) << (b/2 + 11)
}
