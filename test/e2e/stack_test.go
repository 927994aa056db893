//go:build linux

package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// deepFrameRe is frameRe for frame numbers of two or three digits.
var deepFrameRe = regexp.MustCompile(`^          #(\d{2,3})  pc ([0-9a-f]{16})  (\S+)(?: \((.+)\+(\d+)\))?$`)

// TestDeepBacktraces: backtraces are exactly as deep as the option says,
// the walk going up the frame-pointer chain through many chunks of stack,
// in both launch modes, also beyond the kernel's own perf_event_max_stack
// (127 by default).
func TestDeepBacktraces(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		for _, tc := range []struct {
			frames, depth int
			want          []string // the functions of deep's frames, innermost first
		}{
			// bottom, recurse at depths 40 to 0, main.
			{64, 40, slices.Concat([]string{"bottom"}, slices.Repeat([]string{"recurse"}, 41), []string{"main"})},
			{16, 40, slices.Concat([]string{"bottom"}, slices.Repeat([]string{"recurse"}, 15))},
			{200, 250, slices.Concat([]string{"bottom"}, slices.Repeat([]string{"recurse"}, 199))},
			// The most Android allows: every frame kept.
			{256, 300, slices.Concat([]string{"bottom"}, slices.Repeat([]string{"recurse"}, 255))},
		} {
			t.Run(fmt.Sprintf("%s/backtrace=%d/depth=%d", mode.name, tc.frames, tc.depth), func(t *testing.T) {
				r := runMdtrace(t, modeFlag(mode.flag), "-o", fmt.Sprintf("backtrace=%d leak_track", tc.frames), "--", prog("deep"), fmt.Sprint(tc.depth), "100")
				if r.code != 0 {
					t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
				}
				var got []string
				frames := 0
				for _, m := range logMessages(t, r.stderr[strings.Index(r.stderr, "\n")+1:], "") {
					fm := deepFrameRe.FindStringSubmatch(m)
					if fm == nil {
						continue
					}
					frames++
					if fm[3] == prog("deep") && fm[4] != "_start" {
						got = append(got, fm[4])
					}
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("deep's frames (%d):\n%v\nwant (%d):\n%v", len(got), got, len(tc.want), tc.want)
				}
				if frames > tc.frames {
					t.Errorf("%d frames, more than backtrace=%d", frames, tc.frames)
				}
			})
		}
	}
}

// TestFramesWithoutFramePointers: where the frame-pointer register holds
// data (code built without frame pointers), the walk stops instead of
// taking that data for frames: a record outside the stack, or beyond 8 MiB
// above the stack pointer, or a return address outside user space, ends the
// backtrace. testdata/nofp says which frames each block must have.
func TestFramesWithoutFramePointers(t *testing.T) {
	needRoot(t)
	want := map[string][]string{
		"1001": {"call_with_fp"},
		"1002": {"call_with_fp"},
		"1003": {"call_with_fp", "main+3"},
		"1004": {"call_with_fp"},
	}
	sizeRe := regexp.MustCompile(`^\+\+\+ \S+ leaked block of size (\d+) at `)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace leak_track", "--", prog("nofp"))
			if r.code != 0 || r.stdout != "nofp: done\n" {
				t.Fatalf("exit status %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
			}
			got := map[string][]string{}
			size := ""
			for _, m := range logMessages(t, r.stderr[strings.Index(r.stderr, "\n")+1:], "") {
				if sm := sizeRe.FindStringSubmatch(m); sm != nil {
					size = sm[1]
					got[size] = []string{}
					continue
				}
				fm := frameRe.FindStringSubmatch(m)
				if fm == nil || size == "" {
					continue
				}
				if fm[3] != prog("nofp") {
					t.Errorf("block of %s bytes: frame %q is not in nofp", size, m)
					continue
				}
				name := fm[4]
				if name != "call_with_fp" {
					name += "+" + fm[5]
				}
				got[size] = append(got[size], name)
			}
			for size, frames := range want {
				if !slices.Equal(got[size], frames) {
					t.Errorf("block of %s bytes: frames %q, want %q", size, got[size], frames)
				}
			}
			if len(got) != len(want) {
				t.Errorf("leaked blocks %v, want the %d of nofp; stderr:\n%s", got, len(want), r.stderr)
			}
		})
	}
}

// TestTopView: --top shows, every --interval, the allocation sites with the
// most live bytes, named by their innermost frames.
func TestTopView(t *testing.T) {
	needRoot(t)
	m := start(t, mdtraceBin, "--top", "3", "--interval", "200ms", "-o", "backtrace", "--", prog("leaky"), "hold")
	m.expectLine(t, "leaky: done")
	timeRe := regexp.MustCompile(` at \d\d:\d\d:\d\d: `)
	var view []string
	for len(view) < 5 {
		line, err := m.stdout.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the view: %v; stderr:\n%s", err, m.stderr.String())
		}
		view = append(view, timeRe.ReplaceAllString(line, " at HH:MM:SS: "))
	}
	want := []string{
		"       BYTES     BLOCKS  SITE\n",
		"        4096          1  leak_pvalloc <- main <- __libc_start_call_main <- __libc_start_main\n",
		"        1024          1  leak_aligned_alloc <- main <- __libc_start_call_main <- __libc_start_main\n",
		"        1013          1  leak_in_constructor <- __libc_start_main <- _start\n",
	}
	header := regexp.MustCompile(`^mdtrace: process \d+ \(` + regexp.QuoteMeta(prog("leaky")) + `\) at HH:MM:SS: 13 live blocks, 16194 bytes; top 3 of 13 allocation sites:\n$`)
	if !header.MatchString(view[0]) {
		t.Errorf("view header %q", view[0])
	}
	if !slices.Equal(view[1:], want) {
		t.Errorf("view:\n%s\nwant:\n%s", strings.Join(view[1:], ""), strings.Join(want, ""))
	}
	m.stdin.Close()
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
}
