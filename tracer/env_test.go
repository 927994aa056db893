//go:build linux

package tracer

import (
	"slices"
	"testing"
)

func TestPreloadEnv(t *testing.T) {
	env := []string{"HOME=/root", "LD_PRELOAD=/a.so:/b.so", "LIBC_DEBUG_MALLOC_OPTIONS=guard", "X=1=2"}
	got := PreloadEnv(env, "/shim.so", "LIBC_DEBUG_MALLOC_OPTIONS=backtrace")
	want := []string{"HOME=/root", "X=1=2", "LD_PRELOAD=/shim.so:/a.so:/b.so", "LIBC_DEBUG_MALLOC_OPTIONS=backtrace"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	got = PreloadEnv([]string{"LD_PRELOAD="}, "/shim.so")
	if want := []string{"LD_PRELOAD=/shim.so"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
