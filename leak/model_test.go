package leak

import (
	"testing"
	"unsafe"
)

// A million live allocations are a million Allocs: keep them packed.
func TestAllocSize(t *testing.T) {
	if n := unsafe.Sizeof(Alloc{}); n != 32 {
		t.Errorf("Alloc is %d bytes, want 32", n)
	}
}
