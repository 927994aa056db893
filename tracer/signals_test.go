//go:build linux

package tracer

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// TestCountSignals: every signal queued for the process is counted, by
// number, however fast they come and however many the Go runtime merges;
// other signals are not.
func TestCountSignals(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root")
	}
	c, err := CountSignals(os.Getpid(), 45, 49)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.Signal(46), syscall.Signal(47), syscall.Signal(50))
	defer signal.Stop(sigs)
	send := func(sig, n int) {
		for i := 0; i < n; i++ {
			if err := syscall.Kill(os.Getpid(), syscall.Signal(sig)); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(47, 100)
	send(46, 3)
	send(50, 2)
	for sig, want := range map[int]uint64{44: 0, 45: 0, 46: 3, 47: 100, 48: 0, 49: 0, 50: 0} {
		if n, err := c.Count(sig); err != nil || n != want {
			t.Errorf("signal %d: %d (%v), want %d", sig, n, err, want)
		}
	}
	if _, err := CountSignals(os.Getpid(), 45, 53); err == nil {
		t.Error("CountSignals took 9 signals")
	}
}
