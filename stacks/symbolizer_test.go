package stacks

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// wantFrame is what one pc of a fixture should resolve to.
type wantFrame struct {
	fn   string // function name, "" for none
	off  uint64 // offset of the pc from the function's start
	file string // the file whose symbol gives the expected RelPC
	name string // expected MapName
}

// checkFrames symbolizes address+off of each function in want and checks
// every field of the frames.
func checkFrames(t *testing.T, s *Symbolizer, pid int, maps *Maps, addrs map[string]uint64, want map[string]wantFrame) {
	t.Helper()
	var names []string
	var pcs []uint64
	for fn, w := range want {
		a, ok := addrs[fn]
		if !ok {
			t.Fatalf("the fixture printed no address for %s", fn)
		}
		names = append(names, fn)
		pcs = append(pcs, a+w.off)
	}
	frames := s.Symbolize(pid, maps, pcs)
	if len(frames) != len(pcs) {
		t.Fatalf("got %d frames for %d pcs", len(frames), len(pcs))
	}
	for i, fr := range frames {
		w := want[names[i]]
		m := maps.Find(pcs[i])
		if m == nil {
			t.Fatalf("%s: no mapping holds %#x", names[i], pcs[i])
		}
		sym := elfSymbol(t, w.file, names[i])
		exp := Frame{
			PC:      pcs[i],
			RelPC:   sym.Value + w.off,
			MapName: w.name,
			Func:    w.fn,
		}
		if w.fn != "" {
			exp.FuncOff = w.off
		}
		if fr != exp {
			t.Errorf("%s:\n got %+v\nwant %+v", names[i], fr, exp)
		}
		// Android's rel_pc: pc - map.start + map.offset + load_bias.
		if android := pcs[i] - m.Start + m.Offset + execLoadBias(t, w.file); fr.RelPC != android {
			t.Errorf("%s: RelPC %#x, Android's rel_pc %#x", names[i], fr.RelPC, android)
		}
	}
}

func TestSymbolizeLive(t *testing.T) {
	fx := buildFixtures(t)
	for _, tc := range []struct {
		name string
		bin  string
		dyn  bool
	}{
		{"pie", fx.pie, true},
		{"nopie", fx.nopie, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := OpenELF(tc.bin)
			if err != nil {
				t.Fatal(err)
			}
			if f.Dyn != tc.dyn {
				t.Errorf("Dyn = %v, want %v", f.Dyn, tc.dyn)
			}
			if want := elfBuildID(t, tc.bin); f.BuildID != want {
				t.Errorf("BuildID = %q, want %q", f.BuildID, want)
			}
			if !f.HasSymtab() {
				t.Error("HasSymtab() = false")
			}

			pid, addrs := startFixture(t, tc.bin)
			maps, err := ReadMaps(pid)
			if err != nil {
				t.Fatal(err)
			}
			s := NewSymbolizer()
			checkFrames(t, s, pid, maps, addrs, map[string]wantFrame{
				"local_func":    {"local_func", 5, tc.bin, tc.bin},
				"exported_func": {"exported_func", 5, tc.bin, tc.bin},
				"nosize_func":   {"nosize_func", 2, tc.bin, tc.bin},
				"fixlib_func":   {"fixlib_func", 5, fx.lib, fx.lib},
			})
			if !tc.dyn {
				// For ET_EXEC the ELF virtual address is the absolute address.
				fr := s.Symbolize(pid, maps, []uint64{addrs["local_func"] + 5})[0]
				if fr.RelPC != fr.PC {
					t.Errorf("non-PIE RelPC %#x != PC %#x", fr.RelPC, fr.PC)
				}
			}
		})
	}
}

func TestSymbolizeStripped(t *testing.T) {
	fx := buildFixtures(t)
	if _, err := exec.LookPath("strip"); err != nil {
		t.Skip("strip (binutils) is not installed")
	}
	stripped := filepath.Join(fx.dir, "stripped")
	if out, err := exec.Command("strip", "--strip-all", "-o", stripped, fx.pie).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, out)
	}
	f, err := OpenELF(stripped)
	if err != nil {
		t.Fatal(err)
	}
	if f.HasSymtab() {
		t.Error("the stripped file has a .symtab")
	}
	pid, addrs := startFixture(t, stripped)
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Symbol values come from the unstripped build: the layout is the same.
	checkFrames(t, NewSymbolizer(), pid, maps, addrs, map[string]wantFrame{
		"local_func":    {"", 5, fx.pie, stripped},
		"exported_func": {"exported_func", 5, fx.pie, stripped},
		"fixlib_func":   {"fixlib_func", 5, fx.lib, fx.lib},
	})
}

func TestSymbolizeDeleted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("opening /proc/PID/map_files of a process needs root (CAP_SYS_ADMIN); run the tests as root")
	}
	fx := buildFixtures(t)
	bin := filepath.Join(fx.dir, "deleted")
	copyFile(t, fx.pie, bin)
	pid, addrs := startFixture(t, bin)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	if m := maps.Find(addrs["local_func"]); m == nil || m.Path != bin+" (deleted)" {
		t.Fatalf("mapping of local_func: %+v", m)
	}
	want := map[string]wantFrame{
		"local_func":    {"local_func", 5, fx.pie, bin},
		"exported_func": {"exported_func", 5, fx.pie, bin},
		"fixlib_func":   {"fixlib_func", 5, fx.lib, fx.lib},
	}
	s := NewSymbolizer()
	checkFrames(t, s, pid, maps, addrs, want)

	// Without the process (pid 0), a fresh Symbolizer cannot open the
	// deleted file: no names, but the frames keep what is known.
	gone := map[string]wantFrame{
		"local_func":    {"", 5, fx.pie, bin},
		"exported_func": {"", 5, fx.pie, bin},
		"fixlib_func":   {"fixlib_func", 5, fx.lib, fx.lib},
	}
	checkFrames(t, NewSymbolizer(), 0, maps, addrs, gone)
	// The Symbolizer that saw the file while the process lived still has
	// it, under the device and inode of the mapping.
	checkFrames(t, s, 0, maps, addrs, want)
}

func TestSymbolizeVDSO(t *testing.T) {
	fx := buildFixtures(t)
	pid, _ := startFixture(t, fx.pie)
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	var vdso *Mapping
	for i := range maps.Mappings {
		if maps.Mappings[i].Path == "[vdso]" {
			vdso = &maps.Mappings[i]
		}
	}
	if vdso == nil {
		t.Skip("the process has no [vdso] mapping")
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Skipf("cannot read the memory of the child: %v", err)
	}
	defer mem.Close()
	image := make([]byte, vdso.End-vdso.Start)
	if _, err := mem.ReadAt(image, int64(vdso.Start)); err != nil {
		t.Skipf("cannot read the vdso of the child: %v", err)
	}
	ef, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		t.Fatalf("the vdso image does not parse: %v", err)
	}
	dyn, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var target elf.Symbol
	for _, s := range dyn {
		if (s.Name == "__vdso_clock_gettime" || s.Name == "clock_gettime") && s.Size > 1 {
			target = s
		}
	}
	if target.Name == "" {
		t.Skip("the vdso has no clock_gettime")
	}
	names := map[string]bool{}
	for _, s := range dyn {
		if s.Value == target.Value && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			names[s.Name] = true
		}
	}
	var pc uint64
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && target.Value >= p.Vaddr && target.Value-p.Vaddr < p.Filesz {
			pc = vdso.Start + target.Value - p.Vaddr + p.Off + 1
		}
	}
	if pc == 0 {
		t.Fatalf("no PT_LOAD of the vdso holds %s", target.Name)
	}

	frames := NewSymbolizer().Symbolize(pid, maps, []uint64{pc, vdso.Start})
	fr := frames[0]
	if !names[fr.Func] || fr.FuncOff != 1 || fr.MapName != "[vdso]" || fr.RelPC != target.Value+1 || fr.PC != pc {
		t.Errorf("got %+v, want Func in %v, FuncOff 1, MapName [vdso], RelPC %#x", fr, names, target.Value+1)
	}
	// Without the process the vdso cannot be read: no name.
	fr = NewSymbolizer().Symbolize(0, maps, []uint64{pc})[0]
	if fr.Func != "" || fr.MapName != "[vdso]" || fr.RelPC != pc-vdso.Start {
		t.Errorf("pid 0: got %+v", fr)
	}
}

func TestSymbolizerStats(t *testing.T) {
	fx := buildFixtures(t)
	pid, addrs := startFixture(t, fx.pie)
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	m := maps.Find(addrs["local_func"])
	const n = 1000
	pcs := make([]uint64, n)
	for i := range pcs {
		pcs[i] = m.Start + uint64(i)*(m.End-m.Start)/n
	}
	s := NewSymbolizer()
	check := func(step string, wantParsed, wantHits int) {
		t.Helper()
		if p, h := s.Stats(); p != wantParsed || h != wantHits {
			t.Errorf("%s: Stats() = %d parsed, %d hits; want %d, %d", step, p, h, wantParsed, wantHits)
		}
	}
	frames := s.Symbolize(pid, maps, pcs)
	check("first call", 1, n-1)
	named := 0
	for _, fr := range frames {
		if fr.Func != "" {
			named++
		}
	}
	if named == 0 {
		t.Error("no pc of the text mapping got a name")
	}
	s.Symbolize(pid, maps, pcs)
	check("same snapshot", 1, 2*n-1)

	// A new snapshot of the same process: the file is found by its key.
	maps2, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	s.Symbolize(pid, maps2, pcs)
	check("new snapshot", 1, 3*n-1)

	// A copy of the binary (another inode, the same build-id) run by
	// another process is not parsed again.
	cp := filepath.Join(fx.dir, "copy")
	copyFile(t, fx.pie, cp)
	pid2, addrs2 := startFixture(t, cp)
	maps3, err := ReadMaps(pid2)
	if err != nil {
		t.Fatal(err)
	}
	fr := s.Symbolize(pid2, maps3, []uint64{addrs2["local_func"] + 5})[0]
	if fr.Func != "local_func" || fr.MapName != cp {
		t.Errorf("copy: got %+v", fr)
	}
	check("copy", 1, 3*n)
}

func TestSymbolizeConcurrent(t *testing.T) {
	fx := buildFixtures(t)
	pid, addrs := startFixture(t, fx.pie)
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	pcs := []uint64{addrs["local_func"] + 5, addrs["exported_func"] + 5, addrs["fixlib_func"] + 5}
	want := []string{"local_func", "exported_func", "fixlib_func"}
	s := NewSymbolizer()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			snap := maps
			if g%2 == 1 {
				snap = &Maps{Mappings: maps.Mappings, Raw: maps.Raw} // another snapshot
			}
			for range 50 {
				for i, fr := range s.Symbolize(pid, snap, pcs) {
					if fr.Func != want[i] {
						t.Errorf("goroutine %d: got %+v, want %s", g, fr, want[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if parsed, _ := s.Stats(); parsed != 2 {
		t.Errorf("parsed %d files, want 2 (the program and the library)", parsed)
	}
}

func TestSymbolizeBadFiles(t *testing.T) {
	fx := buildFixtures(t)
	good, err := os.ReadFile(fx.lib)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var paths []string
	for _, n := range []int{0, 3, 4, 16, 63, 64, 200, len(good) / 4, len(good) / 2, len(good) - 1} {
		p := filepath.Join(dir, fmt.Sprintf("truncated-%d.so", n))
		if err := os.WriteFile(p, good[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	zeros := filepath.Join(dir, "zeros.so")
	if err := os.WriteFile(zeros, make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "a-directory")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	paths = append(paths, zeros, sub, filepath.Join(dir, "missing.so"))

	if _, err := OpenELF(sub); err == nil || !strings.HasSuffix(err.Error(), ": is a directory") {
		t.Errorf("OpenELF of a directory: %v", err)
	}
	for _, p := range paths {
		if f, err := OpenELF(p); err == nil {
			t.Errorf("OpenELF(%s) = %+v, want an error", p, f)
		} else if !strings.Contains(err.Error(), p) {
			t.Errorf("OpenELF(%s) error %q does not name the file", p, err)
		}
	}

	// One 16-page mapping per file, at offset 0x1000, with the file's inode
	// (a made-up one where there is no file).
	var text strings.Builder
	for i, p := range paths {
		start := uint64(0x10000000 + i*0x100000)
		ino := uint64(1000 + i)
		if fi, err := os.Stat(p); err == nil {
			_, ino, _ = fileID(fi)
		}
		fmt.Fprintf(&text, "%x-%x r-xp 00001000 08:01 %d %s\n", start, start+0x10000, ino, p)
	}
	// Mappings without a file.
	text.WriteString("7f0000000000-7f0000001000 r-xp 00000000 00:00 0 \n")
	text.WriteString("7f0000001000-7f0000002000 rw-p 00000000 00:00 0 [heap]\n")
	text.WriteString("7f0000002000-7f0000003000 r-xs 00002000 00:01 2057 memfd:jit (deleted)\n")
	text.WriteString("7f0000003000-7f0000004000 r-xp 00000000 00:00 0 [vdso]\n")
	text.WriteString("7f0000004000-7f0000005000 rw-p 00000000 00:05 9 /dev/zero (deleted)\n")
	text.WriteString("7f0000005000-7f0000006000 r--p 00000000 00:05 9 /dev/null\n")
	maps, err := ParseMaps([]byte(text.String()))
	if err != nil {
		t.Fatal(err)
	}
	var pcs []uint64
	for _, m := range maps.Mappings {
		pcs = append(pcs, m.Start+0x123)
	}
	pcs = append(pcs, 0x10, ^uint64(0)) // in no mapping

	s := NewSymbolizer()
	for pass := range 2 {
		frames := s.Symbolize(0, maps, pcs)
		for i, fr := range frames {
			want := Frame{PC: pcs[i], RelPC: pcs[i]}
			if i < len(maps.Mappings) {
				m := maps.Mappings[i]
				want.RelPC = pcs[i] - m.Start + m.Offset
				want.MapName = m.Name()
			}
			if fr != want {
				t.Errorf("pass %d, pc %#x:\n got %+v\nwant %+v", pass, pcs[i], fr, want)
			}
		}
	}
	// The truncated files and the file of zeros are regular files: each is
	// parsed once; the second pass hits the cache.
	if parsed, hits := s.Stats(); parsed != len(paths)-2 || hits != len(paths)-2 {
		t.Errorf("Stats() = %d parsed, %d hits; want %d, %d", parsed, hits, len(paths)-2, len(paths)-2)
	}
}

func TestSymbolizeNilAndEmpty(t *testing.T) {
	s := &Symbolizer{} // the zero value works
	if got := s.Symbolize(1, nil, []uint64{1, 2}); len(got) != 2 || got[0] != (Frame{PC: 1, RelPC: 1}) {
		t.Errorf("nil maps: %+v", got)
	}
	if got := s.Symbolize(1, &Maps{}, nil); len(got) != 0 {
		t.Errorf("no pcs: %+v", got)
	}
}

func TestResolverChain(t *testing.T) {
	fx := buildFixtures(t)
	pid, addrs := startFixture(t, fx.pie)
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSymbolizer()
	s.Resolvers = []Resolver{fixedResolver{vaddr: elfSymbol(t, fx.pie, "local_func").Value + 5}, SymbolTable{}}
	frames := s.Symbolize(pid, maps, []uint64{addrs["local_func"] + 5, addrs["exported_func"] + 5})
	if frames[0].Func != "from_first_resolver" || frames[0].FuncOff != 42 {
		t.Errorf("first resolver not used: %+v", frames[0])
	}
	if frames[1].Func != "exported_func" || frames[1].FuncOff != 5 {
		t.Errorf("second resolver not used: %+v", frames[1])
	}
}

// fixedResolver knows one name, at one address.
type fixedResolver struct{ vaddr uint64 }

func (r fixedResolver) Resolve(f *ELFFile, vaddr uint64) (string, uint64, bool) {
	if vaddr == r.vaddr {
		return "from_first_resolver", 42, true
	}
	return "", 0, false
}

// TestParsedAtPath checks the shortcut that spares opening a process's
// /proc/PID/map_files entry: taken for a file parsed already and still at
// its path, not once another file has replaced it there.
func TestParsedAtPath(t *testing.T) {
	maps, err := ReadMaps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The device and inode of the maps line match the path's stat.
	var self *Mapping
	for i := range maps.Mappings {
		m := &maps.Mappings[i]
		if m.Inode != 0 && strings.HasPrefix(m.Path, "/") && !m.Deleted() {
			self = m
			break
		}
	}
	if self == nil {
		t.Fatal("no file mapping in /proc/self/maps")
	}
	fi, err := os.Stat(self.Path)
	if err != nil {
		t.Fatal(err)
	}
	if dev, ino, ok := fileID(fi); !ok || ino != self.Inode || mapsDev(dev) != self.Dev {
		t.Fatalf("%s: stat gives device %s, inode %d; maps %s, %d", self.Path, mapsDev(dev), ino, self.Dev, self.Inode)
	}

	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "lib.so")
	copyFile(t, exe, path)
	m := mappingOf(t, path)
	s := NewSymbolizer()
	if e := s.parsedAtPath(&m); e != nil {
		t.Fatal("a file never parsed is known")
	}
	e, hit := s.lookupMapping(0, &m)
	if hit || e == noFile || e.err != nil {
		t.Fatalf("first lookup: hit %v, entry %+v", hit, e)
	}
	if got := s.parsedAtPath(&m); got != e {
		t.Errorf("parsed and at its path: got %p, want %p", got, e)
	}
	// Rewritten in place: the same inode, another size.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := s.parsedAtPath(&m); got != nil {
		t.Error("a file rewritten in place is still taken for the one parsed")
	}
	// Another file renamed over the path: the mapping's inode is gone.
	other := filepath.Join(dir, "other.so")
	copyFile(t, exe, other)
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if got := s.parsedAtPath(&m); got != nil {
		t.Error("a file replaced at its path is still taken for the mapped one")
	}
}

// mappingOf returns a mapping of the file at path, with its device and
// inode as /proc/PID/maps prints them.
func mappingOf(t *testing.T, path string) Mapping {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	dev, ino, ok := fileID(fi)
	if !ok {
		t.Skip("no inode numbers on this system")
	}
	return Mapping{Start: 0x400000, End: 0x401000, Perms: "r-xp", Dev: mapsDev(dev), Inode: ino, Path: path}
}
