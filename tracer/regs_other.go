//go:build linux && !amd64

package tracer

import (
	"fmt"
	"runtime"
)

// threadState reads the registers of stopped thread tid.
func threadState(tid int) (ThreadState, error) {
	return ThreadState{}, fmt.Errorf("reading the registers of thread %d: not supported on %s", tid, runtime.GOARCH)
}
