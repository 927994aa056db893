package stacks

import (
	"bytes"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// needTools skips the test unless every tool in names is installed.
func needTools(tb testing.TB, names ...string) {
	tb.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			tb.Skipf("%s is not installed; the debug file fixtures are built with it", n)
		}
	}
}

// run runs a command and fails the test if it fails. It returns its
// standard output.
func run(tb testing.TB, name string, args ...string) []byte {
	tb.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// debugFixture is testdata/fixture.c built with DWARF and a build-id, split
// into a stripped program and its debug file.
type debugFixture struct {
	*fixtures
	full     string // built with -g: .symtab and DWARF
	debug    string // objcopy --only-keep-debug of full
	stripped string // strip --strip-all of full
	buildID  string
}

// buildDebugFixture builds a debugFixture in a temporary directory, with
// name as the base name of its files. It also points the debuginfod cache
// at an empty directory, so that no cache of the user's is searched.
func buildDebugFixture(t *testing.T, name string, extra ...string) *debugFixture {
	t.Helper()
	needTools(t, "gcc", "objcopy", "strip")
	fx := buildFixtures(t)
	t.Setenv("DEBUGINFOD_CACHE_PATH", t.TempDir())
	src, err := filepath.Abs("testdata/fixture.c")
	if err != nil {
		t.Fatal(err)
	}
	df := &debugFixture{
		fixtures: fx,
		full:     filepath.Join(fx.dir, name+".full"),
		debug:    filepath.Join(fx.dir, name+".debug"),
		stripped: filepath.Join(fx.dir, name),
	}
	args := append([]string{"-O0", "-g", "-rdynamic", "-fPIE", "-pie", "-Wl,--build-id", "-o", df.full, src,
		"-L" + fx.dir, "-lfixlib", "-Wl,-rpath," + fx.dir}, extra...)
	gcc(t, args...)
	run(t, "objcopy", "--only-keep-debug", df.full, df.debug)
	run(t, "strip", "--strip-all", "-o", df.stripped, df.full)
	df.buildID = elfBuildID(t, df.full)
	return df
}

// buildIDPath returns where a debug file of build-id id goes under dir.
func buildIDPath(dir, id string) string {
	return filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug")
}

// install copies src to dst, creating the directories on the way.
func install(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, src, dst)
}

// withDebug is what the stripped fixture resolves to with its debug file.
func (df *debugFixture) withDebug(bin string) map[string]wantFrame {
	return map[string]wantFrame{
		"local_func":    {"local_func", 5, df.full, bin},
		"exported_func": {"exported_func", 5, df.full, bin},
		"nosize_func":   {"nosize_func", 2, df.full, bin},
		"fixlib_func":   {"fixlib_func", 5, df.lib, df.lib},
	}
}

// withoutDebug is what the stripped fixture resolves to from its .dynsym
// alone.
func (df *debugFixture) withoutDebug(bin string) map[string]wantFrame {
	return map[string]wantFrame{
		"local_func":    {"", 5, df.full, bin},
		"exported_func": {"exported_func", 5, df.full, bin},
		"fixlib_func":   {"fixlib_func", 5, df.lib, df.lib},
	}
}

// symbolizeLive runs bin and checks its frames with a Symbolizer searching
// dirs. It returns the Symbolizer, the pid, the snapshot and the addresses.
func symbolizeLive(t *testing.T, bin string, dirs []string, want map[string]wantFrame) (*Symbolizer, int, *Maps, map[string]uint64) {
	t.Helper()
	pid, addrs := startFixture(t, bin)
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSymbolizer()
	s.DebugDirs = dirs
	checkFrames(t, s, pid, maps, addrs, want)
	return s, pid, maps, addrs
}

// elfFileOf returns the ELFFile s parsed for the mapping holding pc.
func elfFileOf(t *testing.T, s *Symbolizer, pid int, maps *Maps, pc uint64) *ELFFile {
	t.Helper()
	e, _ := s.fileFor(s.memo(pid, maps), maps.index(pc))
	if e.file == nil {
		t.Fatalf("no ELF file for %#x: %v", pc, e.err)
	}
	return e.file
}

func TestDebugFileByBuildID(t *testing.T) {
	df := buildDebugFixture(t, "byid")
	dir := t.TempDir()
	install(t, df.debug, buildIDPath(dir, df.buildID))

	// Without the directory, the local function has no name.
	symbolizeLive(t, df.stripped, nil, df.withoutDebug(df.stripped))

	s, pid, maps, addrs := symbolizeLive(t, df.stripped, []string{t.TempDir(), dir}, df.withDebug(df.stripped))
	f := elfFileOf(t, s, pid, maps, addrs["local_func"])
	if got := f.DebugFile(); got != buildIDPath(dir, df.buildID) {
		t.Errorf("DebugFile() = %q, want the build-id path", got)
	}
	if f.HasSymtab() {
		t.Error("HasSymtab() = true for a stripped file")
	}
}

func TestDebugFileByDebuglink(t *testing.T) {
	df := buildDebugFixture(t, "linked")
	// place puts the linked program in a new directory and its debug file
	// where debugDir says, relative to the program's directory ("" for
	// none), or at an absolute path.
	place := func(t *testing.T, debugDir string, corrupt bool) string {
		dir := filepath.Join(t.TempDir(), "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "linked")
		// objcopy takes the CRC from the debug file as it is now.
		run(t, "objcopy", "--add-gnu-debuglink="+df.debug, df.stripped, bin)
		dst := filepath.Join(dir, debugDir, "linked.debug")
		if filepath.IsAbs(debugDir) {
			dst = filepath.Join(debugDir, dir, "linked.debug")
		}
		install(t, df.debug, dst)
		if corrupt {
			// Still a valid ELF file with the right build-id, but not the
			// file the link was made for.
			fh, err := os.OpenFile(dst, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			fh.Write([]byte{0})
			fh.Close()
		}
		return bin
	}
	t.Run("same directory", func(t *testing.T) {
		bin := place(t, "", false)
		s, pid, maps, addrs := symbolizeLive(t, bin, nil, df.withDebug(bin))
		if got, want := elfFileOf(t, s, pid, maps, addrs["local_func"]).DebugFile(), bin+".debug"; got != want {
			t.Errorf("DebugFile() = %q, want %q", got, want)
		}
	})
	t.Run(".debug subdirectory", func(t *testing.T) {
		bin := place(t, ".debug", false)
		symbolizeLive(t, bin, nil, df.withDebug(bin))
	})
	t.Run("debug directory", func(t *testing.T) {
		root := t.TempDir()
		bin := place(t, root, false)
		symbolizeLive(t, bin, []string{root}, df.withDebug(bin))
	})
	t.Run("wrong CRC", func(t *testing.T) {
		bin := place(t, "", true)
		symbolizeLive(t, bin, nil, df.withoutDebug(bin))
	})
}

func TestDebuginfodCache(t *testing.T) {
	df := buildDebugFixture(t, "cached")
	cache := t.TempDir()
	install(t, df.debug, filepath.Join(cache, df.buildID, "debuginfo"))
	t.Setenv("DEBUGINFOD_CACHE_PATH", cache)
	symbolizeLive(t, df.stripped, nil, df.withDebug(df.stripped))

	// HOME is used when DEBUGINFOD_CACHE_PATH is not set.
	t.Setenv("DEBUGINFOD_CACHE_PATH", "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("SUDO_USER", "")
	home := t.TempDir()
	t.Setenv("HOME", home)
	install(t, df.debug, filepath.Join(home, ".cache", "debuginfod_client", df.buildID, "debuginfo"))
	symbolizeLive(t, df.stripped, nil, df.withDebug(df.stripped))
}

// addMiniDebugInfo makes a copy of the stripped fixture with MiniDebugInfo
// as Fedora's find-debuginfo builds it: the function symbols of the debug
// file that are not in .dynsym, kept in a copy of the debug file without
// anything else, compressed with xz into .gnu_debugdata.
func addMiniDebugInfo(t *testing.T, df *debugFixture) string {
	t.Helper()
	needTools(t, "nm", "xz")
	posixNames := func(out []byte, types string) map[string]bool {
		names := map[string]bool{}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && (types == "" || strings.Contains(types, f[1])) {
				names[f[0]] = true
			}
		}
		return names
	}
	dynsyms := posixNames(run(t, "nm", "-D", "--format=posix", "--defined-only", df.stripped), "")
	funcsyms := posixNames(run(t, "nm", "--format=posix", "--defined-only", df.debug), "Tt")
	var keep []string
	for n := range funcsyms {
		if !dynsyms[n] {
			keep = append(keep, n)
		}
	}
	sort.Strings(keep)
	dir := t.TempDir()
	keepFile := filepath.Join(dir, "keep_symbols")
	if err := os.WriteFile(keepFile, []byte(strings.Join(keep, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mini := filepath.Join(dir, "mini_debuginfo")
	run(t, "objcopy", "-S", "--remove-section", ".gdb_index", "--remove-section", ".comment",
		"--keep-symbols="+keepFile, df.debug, mini)
	run(t, "xz", mini)
	bin := filepath.Join(df.dir, "mini")
	run(t, "objcopy", "--add-section", ".gnu_debugdata="+mini+".xz", df.stripped, bin)
	return bin
}

func TestMiniDebugInfo(t *testing.T) {
	df := buildDebugFixture(t, "minisrc")
	bin := addMiniDebugInfo(t, df)
	s, pid, maps, addrs := symbolizeLive(t, bin, nil, df.withDebug(bin))
	if got := elfFileOf(t, s, pid, maps, addrs["local_func"]).DebugFile(); got != "[.gnu_debugdata]" {
		t.Errorf("DebugFile() = %q, want [.gnu_debugdata]", got)
	}
	// A debug file found by build-id comes before MiniDebugInfo.
	dir := t.TempDir()
	install(t, df.debug, buildIDPath(dir, df.buildID))
	s, pid, maps, addrs = symbolizeLive(t, bin, []string{dir}, df.withDebug(bin))
	if got := elfFileOf(t, s, pid, maps, addrs["local_func"]).DebugFile(); got != buildIDPath(dir, df.buildID) {
		t.Errorf("DebugFile() = %q, want the build-id path", got)
	}
}

// xzBomb returns n zero bytes compressed by xz(1) with extra arguments.
func xzBomb(t *testing.T, n int64, args ...string) []byte {
	t.Helper()
	needTools(t, "xz")
	cmd := exec.Command("xz", append([]string{"-c"}, args...)...)
	cmd.Stdin = &limitedZeros{n: n}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("xz: %v", err)
	}
	return out
}

// limitedZeros is an io.Reader of n zero bytes.
type limitedZeros struct{ n int64 }

func (z *limitedZeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > z.n {
		p = p[:z.n]
	}
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

// allocated returns the bytes allocated while fn runs.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestMiniDebugInfoBomb(t *testing.T) {
	df := buildDebugFixture(t, "bombsrc")
	bomb := xzBomb(t, MaxMiniDebugInfo+(16<<20), "-0", "-T1")
	if len(bomb) > 1<<20 {
		t.Fatalf("the bomb is %d bytes compressed", len(bomb))
	}
	var err error
	if n := allocated(func() { _, err = unxz(bomb, MaxMiniDebugInfo) }); n > 4<<20 {
		t.Errorf("unxz of the bomb allocated %d bytes", n)
	}
	if err == nil {
		t.Error("unxz of the bomb succeeded")
	}
	// The same content under the cap decodes.
	small := xzBomb(t, 1<<20, "-0", "-T1")
	if out, err := unxz(small, MaxMiniDebugInfo); err != nil || len(out) != 1<<20 || bytes.Count(out, []byte{0}) != len(out) {
		t.Errorf("unxz of 1 MiB of zeros: %d bytes, %v", len(out), err)
	}

	bombFile := filepath.Join(t.TempDir(), "bomb.xz")
	if err := os.WriteFile(bombFile, bomb, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(df.dir, "bombed")
	run(t, "objcopy", "--add-section", ".gnu_debugdata="+bombFile, df.stripped, bin)
	var s *Symbolizer
	var pid int
	var maps *Maps
	var addrs map[string]uint64
	n := allocated(func() { s, pid, maps, addrs = symbolizeLive(t, bin, nil, df.withoutDebug(bin)) })
	if n > 32<<20 {
		t.Errorf("symbolizing the program with the bomb allocated %d bytes", n)
	}
	if got := elfFileOf(t, s, pid, maps, addrs["local_func"]).DebugFile(); got != "" {
		t.Errorf("DebugFile() = %q, want none", got)
	}
}

// rewriteIndex returns a copy of the single-stream xz data whose index
// records claim the uncompressed sizes given by size, with the index and
// footer checksums fixed up.
func rewriteIndex(t *testing.T, data []byte, size func(int64) int64) []byte {
	t.Helper()
	le32 := func(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24 }
	put32 := func(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }
	putVarint := func(b []byte, v uint64) []byte {
		for v >= 0x80 {
			b = append(b, byte(v)|0x80)
			v >>= 7
		}
		return append(b, byte(v))
	}
	footer := data[len(data)-12:]
	indexStart := len(data) - 12 - int(le32(footer[4:])+1)*4
	records, err := xzIndex(data[indexStart : len(data)-12])
	if err != nil {
		t.Fatal(err)
	}
	idx := putVarint([]byte{0}, uint64(len(records)))
	for _, r := range records {
		idx = putVarint(putVarint(idx, uint64(r.unpadded)), uint64(size(r.uncompressed)))
	}
	for len(idx)%4 != 0 {
		idx = append(idx, 0)
	}
	idx = append(idx, 0, 0, 0, 0)
	put32(idx[len(idx)-4:], crc32.ChecksumIEEE(idx[:len(idx)-4]))
	out := append(append([]byte(nil), data[:indexStart]...), idx...)
	f := append([]byte(nil), footer...)
	put32(f[4:], uint32(len(idx)/4-1))
	put32(f[:4], crc32.ChecksumIEEE(f[4:10]))
	return append(out, f...)
}

func TestUnxzLyingIndex(t *testing.T) {
	for _, args := range [][]string{{"-0", "-T1"}, {"-0", "-T2", "--block-size=1MiB"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			data := xzBomb(t, 3<<20, args...)
			if out, err := unxz(data, MaxMiniDebugInfo); err != nil || len(out) != 3<<20 {
				t.Fatalf("unxz: %d bytes, %v", len(out), err)
			}
			// An index that claims less than the blocks hold: decoding
			// stops where the index says and fails.
			lie := rewriteIndex(t, data, func(int64) int64 { return 100 })
			var err error
			if n := allocated(func() { _, err = unxz(lie, MaxMiniDebugInfo) }); n > 8<<20 {
				t.Errorf("unxz allocated %d bytes", n)
			}
			if err == nil {
				t.Error("unxz of a lying index succeeded")
			}
			// An index that claims more than the cap is refused at once.
			big := rewriteIndex(t, data, func(int64) int64 { return MaxMiniDebugInfo + 1 })
			if _, err := unxz(big, MaxMiniDebugInfo); err == nil || !strings.Contains(err.Error(), "more than") {
				t.Errorf("unxz of a huge index: %v", err)
			}
		})
	}
}

func TestUnxzChecksAndCorruption(t *testing.T) {
	needTools(t, "xz")
	payload := bytes.Repeat([]byte("mdtrace minidebuginfo "), 5000)
	for _, check := range []string{"none", "crc32", "crc64", "sha256"} {
		cmd := exec.Command("xz", "-c", "-T1", "--check="+check)
		cmd.Stdin = bytes.NewReader(payload)
		data, err := cmd.Output()
		if err != nil {
			t.Fatalf("xz --check=%s: %v", check, err)
		}
		out, err := unxz(data, MaxMiniDebugInfo)
		if err != nil || !bytes.Equal(out, payload) {
			t.Errorf("check %s: %d bytes, %v", check, len(out), err)
		}
		if _, err := unxz(data, int64(len(payload)-1)); err == nil {
			t.Errorf("check %s: a limit below the size did not fail", check)
		}
		// Padding after the stream is allowed.
		if out, err := unxz(append(bytes.Clone(data), 0, 0, 0, 0), MaxMiniDebugInfo); err != nil || !bytes.Equal(out, payload) {
			t.Errorf("check %s with stream padding: %v", check, err)
		}
		// Every truncation and many single-byte flips fail or decode to
		// something, and never panic.
		for n := 0; n < len(data); n += 7 {
			unxz(data[:n], MaxMiniDebugInfo)
			bad := bytes.Clone(data)
			bad[n] ^= 0x55
			if out, err := unxz(bad, MaxMiniDebugInfo); err == nil && check != "none" && !bytes.Equal(out, payload) {
				t.Errorf("check %s: flipping byte %d gave wrong content without an error", check, n)
			}
		}
	}
}

func TestCorruptDebugFiles(t *testing.T) {
	df := buildDebugFixture(t, "corrupt")
	// A debug file of another build (another build-id) of the program.
	other := buildDebugFixture(t, "other", "-DOTHER_BUILD", "-O1")
	if other.buildID == df.buildID {
		t.Fatal("the two builds have the same build-id")
	}
	good, err := os.ReadFile(df.debug)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for i, write := range []func(path string){
		func(p string) { os.WriteFile(p, good[:len(good)/2], 0o644) }, // truncated
		func(p string) { os.WriteFile(p, good[:100], 0o644) },         // truncated in the header
		func(p string) { os.WriteFile(p, nil, 0o644) },                // empty
		func(p string) { install(t, other.debug, p) },                 // wrong build-id
		func(p string) { os.WriteFile(p, bytes.Repeat([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0}, 1000), 0o644) },
		func(p string) { os.MkdirAll(p, 0o755) }, // a directory
	} {
		dir := filepath.Join(t.TempDir(), strconv.Itoa(i))
		p := buildIDPath(dir, df.buildID)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		write(p)
		dirs = append(dirs, dir)
	}
	// Only bad debug files: the program still resolves from its .dynsym.
	symbolizeLive(t, df.stripped, dirs, df.withoutDebug(df.stripped))
	// A good debug file after the bad ones is used.
	goodDir := t.TempDir()
	install(t, df.debug, buildIDPath(goodDir, df.buildID))
	s, pid, maps, addrs := symbolizeLive(t, df.stripped, append(dirs, goodDir), df.withDebug(df.stripped))
	if _, line, ok := s.Line(pid, maps, addrs["local_func"]); !ok || line == 0 {
		t.Errorf("Line with a good debug file after bad ones: %d, %v", line, ok)
	}
}
