//go:build linux && amd64

package tracer

import (
	"fmt"
	"os/exec"
	"testing"
)

// TestXsaveFrameSize: the size of vector state mdtrace puts in a frame for
// a process's features is the one the kernel puts in the process's own
// signal frames, which rt_sigreturn checks a frame against.
func TestXsaveFrameSize(t *testing.T) {
	out, err := exec.Command(testProg(t, "xframe")).Output()
	if err != nil {
		t.Fatalf("xframe: %v", err)
	}
	var size int
	var features uint64
	if _, err := fmt.Sscanf(string(out), "xstate_size %d xfeatures %v\n", &size, &features); err != nil {
		t.Fatalf("xframe said %q: %v", out, err)
	}
	l := xsave()
	if l.max < size {
		t.Errorf("the processor's largest state is %d bytes, less than a frame's %d", l.max, size)
	}
	if features&l.dynamic != 0 {
		t.Errorf("a process that asked for nothing has features %#x in its frames, dynamic ones (%#x) among them", features, l.dynamic)
	}
	if got := l.frameSize(features); got != size {
		t.Errorf("frameSize(%#x) = %d, the kernel's frame has %d", features, got, size)
	}
}
