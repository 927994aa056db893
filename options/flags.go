package options

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/tracer"
)

// DefaultOptions are the malloc debug options used when none are given.
const DefaultOptions = "backtrace leak_track"

// defaultTopInterval is the period of --top's view without --interval.
const defaultTopInterval = 5 * time.Second

// DefaultAuditSampleBytes is --all's sampling interval without
// --sample-bytes: heapprofd's default, 4096 bytes. An audit probes every
// process on the host, and a block not sampled costs its probe hits but no
// backtrace and no room in the table; --sample-bytes 0 counts every one.
const DefaultAuditSampleBytes = 4096

// EnvVar is the environment variable Android reads its options from.
const EnvVar = abi.EnvOptions

// Flags are mdtrace's command-line settings.
type Flags struct {
	// Options is the malloc debug option string, assembled from -o (or
	// LIBC_DEBUG_MALLOC_OPTIONS) and the kebab-case option flags, in the
	// order they were given.
	Options   string
	PID       int
	Log       string
	Folded    string
	ReadyFile string
	// Shim is the LD_PRELOAD library for the memory-rewriting options;
	// "" looks for libmdshim.so next to mdtrace, then in
	// ../lib/mdtrace from mdtrace's folder, where make install puts it.
	Shim string
	// NoPreload launches a command without the shim when the options do
	// not need it: the allocator itself is probed, as when attaching.
	NoPreload bool
	// UnreachableOnly limits the leak_track report at exit to the blocks
	// that nothing in the process points to any more.
	UnreachableOnly bool
	// UnreachableFirst classifies the leak_track report at exit: the
	// leaked blocks nothing points to first, then those still reachable.
	UnreachableFirst bool
	// MaxLeaks, when not 0, limits the leak_track report at exit to its
	// first MaxLeaks blocks in Android's format; the rest are summed up by
	// backtrace.
	MaxLeaks uint64
	// UnreachableContents adds the first bytes of each unreachable block
	// to the checks of check_unreachable_on_signal, as libmemunreachable's
	// log_contents does.
	UnreachableContents bool
	// Stats writes heaptrack-like statistics of each process's calls at
	// its exit, on standard error.
	Stats bool
	// NoBatch makes the shim report each call at its probe sites rather
	// than a thread's calls a batch at a time.
	NoBatch bool
	// Inject loads the shim into the process attached to (-p) and routes
	// its allocator calls through the shim's batches instead of probing
	// the allocator.
	Inject bool
	// InjectCalls, with --all --inject, is the count of allocator calls
	// at which a process is taken; 0 measures it.
	InjectCalls uint32
	// FollowForks traces the children an attached process forks from now
	// on (launched commands' children always are).
	FollowForks bool
	// Hold holds an attached process with ptrace while it is traced, as
	// a launched command is: its execs and its exit are seen as they
	// happen.
	Hold bool
	// All audits every process that uses the system's libc.
	All bool
	// Duration ends --all's audit after it, with a summary; 0: at an
	// interrupt.
	Duration time.Duration
	// Format is --all's summaries' form: "text" or "json".
	Format string
	// Program traces every process that executes a program whose file
	// name contains it, from now on (Android's libc.debug.malloc.program).
	Program string
	// Interval is the period of --all's summaries, and of heap dumps of
	// the traced processes otherwise; 0 for none.
	Interval time.Duration
	// SampleBytes, when positive, samples allocations, one every
	// SampleBytes bytes on average (Poisson sampling by bytes, as
	// heapprofd's): in the shim when it is preloaded into a launched
	// command or loaded with --inject, in the probes on the allocator
	// otherwise. --all samples by default (DefaultAuditSampleBytes);
	// 0 is every allocation.
	SampleBytes uint64
	// Top, when positive, makes each --interval show the top Top
	// allocation sites of each traced process instead of writing dumps.
	Top       int
	MaxAllocs uint32
	// DebugDirs are searched for separate debug files, by build-id and
	// .gnu_debuglink, before /usr/lib/debug.
	DebugDirs []string
	Version   bool
	Help      bool
	// Check reports what the kernel supports and exits.
	Check bool
	// FileMode is the permissions of the files mdtrace writes: private
	// (0600) unless asked, since they hold heap addresses and memory
	// maps of processes traced as root.
	FileMode os.FileMode
	// Suppressions are files of LeakSanitizer-style rules ("leak:PATTERN")
	// for leaks the report leaves out; NoDefaultSuppressions leaves out
	// the built-in rules for the runtimes' own blocks;
	// PrintSuppressions prints the rules in force and exits.
	Suppressions          []string
	NoDefaultSuppressions bool
	PrintSuppressions     bool
	// User, when set, is the user a launched command runs as (-u): its
	// uid, gid and groups.
	User string
	// Command is the program to launch and its arguments.
	Command []string
}

// UsageError is a command-line error: mdtrace prints it with a hint and
// exits with status 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// helpItem is a command line of the help, with what it does.
type helpItem struct{ command, what string }

// The sections of the help, which the man page (WriteManPage) holds too.
const helpIntro = `mdtrace brings Android's malloc debug to Linux: it traces every allocation
of a process with eBPF uprobes, without rebuilding or restarting anything,
and writes Android's leak reports and native heap dumps.`

var helpUsage = []helpItem{
	{"mdtrace [flags] -p PID", "attach to a running process"},
	{"mdtrace [flags] -- COMMAND [ARGS]", "launch a command under malloc debug"},
	{"mdtrace [flags] --program NAME", "trace every process that runs NAME from now on"},
	{"mdtrace --all", "audit every process"},
	{"mdtrace report [flags] DUMP", "read a heap dump: by backtrace, as a tree, folded, pprof or an HTML flame graph (report -h)"},
	{"mdtrace diff [flags] OLD NEW", "growth by backtrace between two heap dumps (diff -h)"},
	{"mdtrace replay [--allocator LIB] RECORDS", "replay a record_allocs file's calls: time, peak bytes and RSS (replay -h)"},
	{"mdtrace unreachable [--contents] -p PID", "check a process that an mdtrace traces for unreachable memory now (unreachable -h)"},
	{"mdtrace stats RECORDS", "heaptrack-like statistics of a record_allocs file's calls (stats -h; --stats for a run's)"},
}

var helpExamples = []helpItem{
	{"sudo mdtrace -p 1234 --backtrace", `attach to process 1234 and record a backtrace of every allocation; at Ctrl-C,
show the live blocks by backtrace; kill -47 $(pidof mdtrace) writes a heap dump
to /tmp/backtrace_heap.1234.txt`},
	{`sudo mdtrace -o "backtrace leak_track" -- ./prog args`, "launch; at exit, log every block still allocated with its backtrace"},
	{`sudo mdtrace -o "backtrace backtrace_dump_on_exit backtrace_dump_prefix=/tmp/h" -- ./prog`,
		"write an Android Native Heap Dump to /tmp/h.PID.exit.txt at exit"},
	{"sudo mdtrace --backtrace=32 --leak-track --log leaks.txt -- ./prog", ""},
	{`sudo mdtrace -o "record_allocs record_allocs_on_exit record_allocs_file=/tmp/r" -- ./prog`,
		"every allocation and free, in Android's record format, to /tmp/r.PID"},
}

const helpOptions = `Options are Android's malloc debug option string (-o, or the environment
variable LIBC_DEBUG_MALLOC_OPTIONS), with the same names, aliases, ranges and
error messages; every option is also a flag. Without any, mdtrace uses
"` + DefaultOptions + `".`

const helpSignals = `Signals sent to mdtrace: 47 writes a heap dump (PREFIX.PID.txt) with the
backtrace option; 46 writes the record_allocs file and clears the records;
45 toggles backtraces with backtrace_enable_on_signal; SIGINT and SIGTERM
write the reports that were asked for and detach.`

const helpRequirements = `Linux with BTF and uprobes; root, or CAP_BPF, CAP_PERFMON and
CAP_SYS_PTRACE. Traced programs: 64-bit x86-64, using glibc's malloc (or
another allocator that exports malloc).`

// helpExitStatus is said by the man page only.
const helpExitStatus = `With a command, the command's exit status, or 128 plus the number of the
signal that ended it (126 or 127 when it cannot be run, as a shell says).
With -p, 0 when interrupted, or the status of the process if it ends while
traced. 1 when mdtrace fails; 2 for a bad command line or option string.`

// longHelp is the help before the flags.
func longHelp() string {
	var b strings.Builder
	b.WriteString(helpIntro + "\n\nUsage:\n")
	// The descriptions in one column, past the longest command.
	width := 36
	for _, u := range helpUsage {
		width = max(width, len(u.command)+3)
	}
	for _, u := range helpUsage {
		fmt.Fprintf(&b, "  %-*s%s\n", width, u.command, u.what)
	}
	b.WriteString("\nExamples:\n")
	for _, e := range helpExamples {
		fmt.Fprintf(&b, "  %s\n", e.command)
		for _, l := range strings.Split(e.what, "\n") {
			if l != "" {
				fmt.Fprintf(&b, "      %s\n", l)
			}
		}
	}
	b.WriteString("\n" + helpOptions + "\n\n" + helpSignals + "\n\nRequirements: " + helpRequirements + "\n\nFlags:\n")
	return b.String()
}

// flagSet is mdtrace's flags, defined on f, with the values ParseFlags
// reads itself once they are parsed.
type flagSet struct {
	*pflag.FlagSet
	optString, fileMode *string
	// kebab maps the flag name of each malloc debug option to the option.
	kebab map[string]OptionInfo
}

// noValue is the value of a bare --option, which takes the option's
// default.
const noValue = "default"

// newFlagSet defines mdtrace's flags on f, in the order the help and the
// man page list them.
func newFlagSet(f *Flags) *flagSet {
	fs := pflag.NewFlagSet("mdtrace", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetInterspersed(false)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	optString := fs.StringP("options", "o", "", "malloc debug option string, as Android's libc.debug.malloc.options (default $"+EnvVar+", else \""+DefaultOptions+"\")")
	fs.IntVarP(&f.PID, "pid", "p", 0, "attach to the running process `PID`")
	fs.StringVarP(&f.User, "user", "u", "", "run the launched command as `USER` (a name or a uid of /etc/passwd): with its uid, gid and groups, as strace -u does, and its HOME, USER and LOGNAME; mdtrace stays root")
	fs.StringVar(&f.Log, "log", "", "write the malloc_debug log to `FILE` (default: standard error)")
	fs.StringVar(&f.Folded, "folded", "", "at exit, write the live bytes as folded stacks (flame graph input, with file:line) to `FILE` (FILE.PID for processes after the first)")
	fs.StringVar(&f.Shim, "shim", "", "the LD_PRELOAD library at `PATH` preloaded into a launched command, for its probe sites and for guard, fill, free_track, expand_alloc and verify_pointers (default: libmdshim.so next to mdtrace, else in ../lib/mdtrace from its folder, where make install puts it)")
	fs.BoolVar(&f.All, "all", false, "audit every process on the host that uses the system's libc (or a container's copy): the processes ranked by the live bytes they allocated since the audit began, with the backtrace option their top allocation sites (and heap dumps on signal 47), on interrupt, at --duration and every --interval")
	fs.StringVar(&f.Program, "program", "", "trace every process that runs a program whose file name contains `NAME`, from its first instruction, until interrupted (Android's libc.debug.malloc.program)")
	fs.DurationVar(&f.Duration, "duration", 0, "with --all, end the audit after `DURATION` (e.g. 1m) with its summary")
	fs.StringVar(&f.Format, "format", "text", "with --all, the summaries' `FORM`: text, or json (one object a summary, a line each)")
	fs.DurationVar(&f.Interval, "interval", 0, "every `DURATION` (e.g. 10s), print --all's summary, or write a heap dump of each traced process (with the backtrace option)")
	fs.Uint64Var(&f.SampleBytes, "sample-bytes", 0, fmt.Sprintf("sample allocations, one every `N` bytes allocated on average (a block of N bytes or more always), as heapprofd does: in the shim, so that the others cost no probe, or in the probes on the allocator (-p, --program, --no-preload, --all), so that the others cost no backtrace and no room in the table; block counts and byte totals in the reports become unbiased estimates, sizes stay exact; 0 reports every allocation (default: 0, and %d with --all)", DefaultAuditSampleBytes))
	fs.IntVar(&f.Top, "top", 0, "every --interval (default 5s), show the `N` allocation sites of each traced process with the most live bytes, redrawn in place on a terminal, instead of writing heap dumps (needs the backtrace option)")
	fs.BoolVar(&f.FollowForks, "follow-forks", false, "with -p, also trace the processes it forks from now on (a launched command's always are)")
	fs.BoolVar(&f.Hold, "hold", false, "with -p, hold the process with ptrace while tracing it, as a launched command is: a program it executes is probed before it runs, and its exit reports read it at its exit; debuggers cannot attach beside mdtrace then")
	fs.BoolVar(&f.NoPreload, "no-preload", false, "launch the command without the shim and probe its allocator itself (slower; not with guard, fill, free_track or expand_alloc)")
	fs.BoolVar(&f.UnreachableOnly, "unreachable-only", false, "with leak_track, report at exit only the leaked blocks that nothing in the process points to any more (as libmemunreachable finds them), not those still reachable from its globals, stacks and registers")
	fs.BoolVar(&f.UnreachableFirst, "unreachable-first", false, "with leak_track, check at exit which leaked blocks the process can still reach: list first those that nothing points to any more, then those still reachable from its globals, stacks, registers and TLS, each group under a line that counts it")
	fs.BoolVar(&f.UnreachableContents, "unreachable-contents", false, "with check_unreachable_on_signal, log the first 32 bytes of each unreachable block in hex and ASCII, as libmemunreachable's log_contents does")
	fs.Uint64Var(&f.MaxLeaks, "max-leaks", 0, "with leak_track, list the first `N` leaked blocks one by one in Android's format, and the rest by backtrace: how many blocks and bytes, and the backtrace once (0 lists them all; the bottom line counts them all)")
	fs.BoolVar(&f.Stats, "stats", false, "at each process's exit, write statistics of its allocator calls on standard error, as heaptrack_print does: allocations and bytes, the peak of the live heap and when, temporary allocations, sizes by powers of two, and (with the backtrace option) the call sites that allocate the most and that hold the most at their peak; every call reaches a probe (slower, as record_allocs)")
	fs.BoolVar(&f.NoBatch, "no-batch", false, "have the preloaded shim report each allocator call to the probes as it is made, instead of each thread's calls a batch at a time (slower; the command is then held at its start until the probes are live, rather than started at once)")
	fs.BoolVar(&f.Inject, "inject", false, "with -p, load the shim into the running process and route its calls of malloc, free and the others through the shim's batches, as a launched command's are (several times cheaper than probes on the allocator; every call is given back to the allocator when mdtrace ends); with --all, do so for each process once its probe hits have cost it about what the shim's loading would, sampling in the process")
	fs.Uint32Var(&f.InjectCalls, "inject-calls", 0, "with --all --inject, load the shim into a process at its `N`th call of the allocator (default 0: at the count whose probe hits cost a process about what the shim's loading does: the cost of a hit and of an injection measured at the start, the injection on a shell of mdtrace's own (16 ms if it cannot be), then what the injections made cost)")
	fs.StringVar(&f.ReadyFile, "ready-file", "", "create `FILE` once the probes are live (with --all, once the processes running are looked at too; for scripts and tests)")
	fs.Uint32Var(&f.MaxAllocs, "max-allocs", tracer.DefaultMaxAllocs, fmt.Sprintf("room `N` of the live allocation table, at least N blocks (at most %d), which grows to it as it fills; allocations beyond it are counted, not tracked", tracer.MaxMaxAllocs))
	fs.StringArrayVar(&f.DebugDirs, "debug-dir", nil, "search `DIR` for separate debug files, by build-id and .gnu_debuglink (repeatable)")
	fs.BoolVar(&f.Check, "check", false, "say what this kernel has of what mdtrace uses, and what mdtrace does without it; load the BPF programs as each mode does; exit 0 if mdtrace can run here")
	fs.StringArrayVar(&f.Suppressions, "suppressions", nil, "leave out of leak reports the leaks whose backtrace matches a rule of `FILE`, in LeakSanitizer's format: \"leak:PATTERN\", a function, library or source file, * for any characters (repeatable)")
	fs.BoolVar(&f.NoDefaultSuppressions, "no-default-suppressions", false, "report the C and C++ runtimes' own blocks too (glibc's locale data, NSS modules and stdio buffers, the loader's TLS, libstdc++'s emergency pool), which the built-in suppressions leave out")
	fs.BoolVar(&f.PrintSuppressions, "print-suppressions", false, "print the suppressions in force (the built-in ones, then those of --suppressions) and exit")
	fileMode := fs.String("file-mode", "0600", "permissions `MODE`, in octal, of the files mdtrace writes (log, heap dumps, records, --folded); they belong to the user who ran sudo")
	fs.BoolVar(&f.Version, "version", false, "print the version and exit")
	fs.BoolVarP(&f.Help, "help", "h", false, "show this help")

	// Every malloc debug option is also a kebab-case flag; a bare
	// --option (or --option=default) takes the option's default value.
	kebab := map[string]OptionInfo{}
	for _, o := range Options {
		name := strings.ReplaceAll(o.Name, "_", "-")
		kebab[name] = o
		switch o.Value {
		case ValueNone:
			fs.Bool(name, false, o.Help)
		default:
			kind := "STRING"
			if o.Numeric {
				kind = "N"
			}
			fs.Var(&optionValue{kind: kind}, name, o.Help)
			if o.Value == ValueOptional {
				fs.Lookup(name).NoOptDefVal = noValue
			}
		}
	}
	return &flagSet{fs, optString, fileMode, kebab}
}

// ParseFlags parses mdtrace's command line.
func ParseFlags(args []string, stdout io.Writer) (*Flags, error) {
	f := &Flags{MaxAllocs: tracer.DefaultMaxAllocs}
	set := newFlagSet(f)
	fs, optString, fileMode, kebab := set.FlagSet, set.optString, set.fileMode, set.kebab
	var fromFlags []string
	err := fs.ParseAll(args, func(fl *pflag.Flag, value string) error {
		if o, ok := kebab[fl.Name]; ok {
			switch {
			case o.Value == ValueNone:
				if value != "true" && value != "false" {
					return fmt.Errorf("value set for option '%s' which does not take a value", o.Name)
				}
				if value == "true" {
					fromFlags = append(fromFlags, o.Name)
				}
			case value == noValue:
				fromFlags = append(fromFlags, o.Name)
				value = ""
			default:
				if value == "" || strings.ContainsFunc(value, isSpaceRune) {
					return fmt.Errorf("bad value for option '%s'", o.Name)
				}
				fromFlags = append(fromFlags, o.Name+"="+value)
			}
		}
		return fs.Set(fl.Name, value)
	})
	if err != nil {
		return nil, &UsageError{err.Error()}
	}
	if f.Help {
		fmt.Fprint(stdout, longHelp())
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return f, nil
	}
	if f.Version {
		return f, nil
	}
	if f.Check {
		if fs.NArg() > 0 || fs.NFlag() > 1 {
			return nil, &UsageError{"--check takes no other flag and no command"}
		}
		return f, nil
	}
	if f.PrintSuppressions {
		if fs.NArg() > 0 {
			return nil, &UsageError{"--print-suppressions takes no command"}
		}
		return f, nil
	}
	f.Command = fs.Args()
	// "--backtrace 32": an option whose value is optional takes it only
	// after '=', and 32 would be run as the command.
	if at := len(args) - len(f.Command); len(f.Command) > 0 && at > 0 {
		prev := args[at-1]
		if o, ok := kebab[strings.TrimPrefix(prev, "--")]; ok && strings.HasPrefix(prev, "--") && o.Value == ValueOptional {
			if _, err := strconv.ParseUint(f.Command[0], 0, 64); err == nil {
				return nil, &UsageError{fmt.Sprintf("%s takes its value after '=': use %s=%s (%q would be run as the command)", prev, prev, f.Command[0], f.Command[0])}
			}
		}
	}

	opts := *optString
	if !fs.Changed("options") {
		opts = os.Getenv(EnvVar)
	}
	opts = strings.TrimSpace(opts + " " + strings.Join(fromFlags, " "))
	if opts == "" {
		opts = DefaultOptions
	}
	f.Options = opts
	mode, err := strconv.ParseUint(*fileMode, 8, 32)
	if err != nil || mode > 0o777 {
		return nil, &UsageError{fmt.Sprintf("invalid --file-mode %q: permissions in octal, such as 0600 or 0644", *fileMode)}
	}
	f.FileMode = os.FileMode(mode)
	if f.Top > 0 && f.Interval == 0 {
		f.Interval = defaultTopInterval
	}
	if f.All && !fs.Changed("sample-bytes") {
		f.SampleBytes = DefaultAuditSampleBytes
	}

	switch {
	case fs.Changed("user") && f.User == "":
		return nil, &UsageError{"--user needs a user name"}
	case f.User != "" && (f.PID != 0 || f.All || fs.Changed("program")):
		return nil, &UsageError{"--user runs a command mdtrace launches as USER: not with -p, --program or --all"}
	case f.All && (f.PID != 0 || len(f.Command) > 0 || fs.Changed("program")):
		return nil, &UsageError{"--all audits every process: give neither -p, --program nor a command"}
	case (fs.Changed("duration") || fs.Changed("format")) && !f.All:
		return nil, &UsageError{"--duration and --format are for --all's audit"}
	case f.Format != "text" && f.Format != "json":
		return nil, &UsageError{fmt.Sprintf("invalid --format %q: text or json", f.Format)}
	case f.Duration < 0:
		return nil, &UsageError{fmt.Sprintf("invalid --duration %s", f.Duration)}
	case f.Interval < 0:
		return nil, &UsageError{fmt.Sprintf("invalid --interval %s", f.Interval)}
	case f.SampleBytes > tracer.MaxSampleBytes:
		return nil, &UsageError{fmt.Sprintf("--sample-bytes %d is over the most, %d (1 TiB)", f.SampleBytes, uint64(tracer.MaxSampleBytes))}
	case f.NoBatch && (f.PID != 0 || f.All || f.Program != "" || f.NoPreload):
		return nil, &UsageError{"--no-batch is about the shim preloaded into a launched command: not with -p, --program, --all or --no-preload"}
	case f.Top < 0:
		return nil, &UsageError{fmt.Sprintf("invalid --top %d", f.Top)}
	case f.All && f.Top > 0:
		return nil, &UsageError{"--top is for traced processes: --all prints its own summary"}
	case fs.Changed("inject-calls") && !(f.All && f.Inject):
		return nil, &UsageError{"--inject-calls is the count of calls at which --all --inject takes a process: only with --all --inject"}
	case f.All && f.Inject && f.SampleBytes == 0:
		return nil, &UsageError{"--all --inject samples in the processes it loads the shim into: not with --sample-bytes 0"}
	case f.All:
		// Only the backtrace option means something to an audit: the
		// sites of each process's growth. Without options, none.
		if !fs.Changed("options") && len(fromFlags) == 0 {
			f.Options = ""
			return f, nil
		}
		cfg, err := ParseOptions(f.Options, "--all")
		if err != nil {
			return nil, &UsageError{err.Error()}
		}
		for _, name := range cfg.Set {
			if !auditOptions[name] {
				return nil, &UsageError{fmt.Sprintf("--all takes only the backtrace option (the sites of each process's growth) and its heap dumps' (backtrace_dump_on_exit, backtrace_dump_prefix), not %s", name)}
			}
		}
		if !cfg.Has(Backtrace) && (cfg.BacktraceDumpOnExit || slices.Contains(cfg.Set, "backtrace_dump_prefix")) {
			return nil, &UsageError{"--all writes heap dumps only with the backtrace option"}
		}
		return f, nil
	case fs.Changed("program") && (f.PID != 0 || len(f.Command) > 0):
		return nil, &UsageError{"--program traces the processes that run NAME from now on: give neither -p nor a command"}
	case fs.Changed("program") && f.Program == "":
		return nil, &UsageError{"--program needs a program name"}
	case strings.Contains(f.Program, "/"):
		return nil, &UsageError{fmt.Sprintf("--program %q: NAME is matched within file names, so it cannot hold a '/'", f.Program)}
	case len(f.Program) >= tracer.MaxProgramName:
		return nil, &UsageError{fmt.Sprintf("--program NAME is at most %d bytes long", tracer.MaxProgramName-1)}
	case f.Program != "" && f.FollowForks:
		return nil, &UsageError{"--follow-forks is for -p: with --program, children are always traced"}
	case f.Program != "" && f.NoPreload:
		return nil, &UsageError{"--no-preload is for launched commands; with --program nothing is preloaded"}
	case f.PID != 0 && len(f.Command) > 0:
		return nil, &UsageError{"give either -p PID or a command, not both"}
	case fs.Changed("pid") && f.PID <= 0:
		return nil, &UsageError{fmt.Sprintf("invalid PID %d", f.PID)}
	case f.PID == 0 && len(f.Command) == 0 && f.Program == "":
		return nil, &UsageError{"nothing to trace: give -p PID, --program NAME or a command after --"}
	case f.FollowForks && f.PID == 0:
		return nil, &UsageError{"--follow-forks is for -p: a launched command's children are always traced"}
	case f.Hold && f.PID == 0:
		return nil, &UsageError{"--hold is for -p: a launched command is always held, and --program holds each process"}
	case f.Inject && f.PID == 0:
		return nil, &UsageError{"--inject loads the shim into a running process: it is for -p (a launched command has the shim preloaded)"}
	case f.Inject && (f.FollowForks || f.Hold || f.Stats):
		return nil, &UsageError{"--inject routes the calls of one running process through the shim's batches: not with --follow-forks, --hold or --stats"}
	case f.NoPreload && f.PID != 0:
		return nil, &UsageError{"--no-preload is for launched commands; with -p nothing is preloaded"}
	case f.MaxAllocs == 0:
		return nil, &UsageError{"--max-allocs must be at least 1"}
	case f.MaxAllocs > tracer.MaxMaxAllocs:
		return nil, &UsageError{fmt.Sprintf("--max-allocs is at most %d, a live table of 5.2 GB", tracer.MaxMaxAllocs)}
	}
	return f, nil
}

func isSpaceRune(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\v' || r == '\f' || r == '\r'
}

// supported are the options this version of mdtrace implements; the others
// are recognized, and refused with "not supported yet" rather than ignored.
var supported = map[string]bool{
	"backtrace":                     true,
	"backtrace_enable_on_signal":    true,
	"backtrace_dump_on_exit":        true,
	"backtrace_dump_prefix":         true,
	"backtrace_full":                true,
	"backtrace_size":                true,
	"backtrace_min_size":            true,
	"backtrace_max_size":            true,
	"leak_track":                    true,
	"record_allocs":                 true,
	"record_allocs_file":            true,
	"record_allocs_on_exit":         true,
	"verify_pointers":               true,
	"abort_on_error":                true,
	"verbose":                       true,
	"log_allocator_stats_on_signal": true,
	"log_allocator_stats_on_exit":   true,
	"check_unreachable_on_signal":   true,
}

// shimOptions are implemented by the shim, preloaded into a launched
// command, because they rewrite memory.
// auditOptions are the options --all takes: the backtrace option, and its
// heap dumps (signal 47; at each process's end).
var auditOptions = map[string]bool{
	"backtrace":              true,
	"backtrace_dump_on_exit": true,
	"backtrace_dump_prefix":  true,
}

var shimOptions = map[string]bool{
	"guard":                           true,
	"front_guard":                     true,
	"rear_guard":                      true,
	"fill":                            true,
	"fill_on_alloc":                   true,
	"fill_on_free":                    true,
	"expand_alloc":                    true,
	"free_track":                      true,
	"free_track_backtrace_num_frames": true,
}

// errUnsupported is returned for an option a later version implements.
var errUnsupported = errors.New("not supported yet")

// ParseOptions parses the option string and refuses options mdtrace does
// not implement yet, and shim options for a process it attaches to.
func ParseOptions(s string, noShim string) (*Config, error) {
	cfg, err := ParseConfig(s)
	if err != nil {
		return nil, err
	}
	for _, name := range cfg.Set {
		switch {
		case shimOptions[name] && noShim != "":
			return nil, fmt.Errorf("option %s rewrites memory through the preloaded shim: it needs a command launched by mdtrace, not %s", name, noShim)
		case !supported[name] && !shimOptions[name]:
			return nil, fmt.Errorf("option %s is %w", name, errUnsupported)
		}
	}
	return cfg, nil
}

// CheckPreload refuses --no-preload with options only the shim implements.
func CheckPreload(flags *Flags, cfg *Config) error {
	if !flags.NoPreload {
		return nil
	}
	for _, name := range cfg.Set {
		if shimOptions[name] {
			return fmt.Errorf("option %s rewrites memory through the preloaded shim, which --no-preload turns off", name)
		}
	}
	return nil
}

// CheckSampling refuses --sample-bytes with the options that need every
// call.
func CheckSampling(flags *Flags, cfg *Config) error {
	if flags.SampleBytes == 0 {
		return nil
	}
	for _, name := range []string{"record_allocs", "verify_pointers"} {
		if slices.Contains(cfg.Set, name) {
			return fmt.Errorf("option %s needs every allocator call: it cannot be used with --sample-bytes", name)
		}
	}
	return nil
}

// CheckInterval refuses --interval without the backtrace option, outside
// --all: the periodic output is a heap dump.
func CheckInterval(flags *Flags, cfg *Config) error {
	if flags.Top > 0 && !cfg.Has(Backtrace) {
		return errors.New("--top lists allocation sites by their backtraces: it needs the backtrace option")
	}
	if flags.Interval > 0 && !cfg.Has(Backtrace) {
		return errors.New("--interval writes heap dumps of the traced processes: it needs the backtrace option")
	}
	return nil
}

// NeedsShim reports whether the options need the shim preloaded.
func NeedsShim(cfg *Config) bool {
	return len(ShimOptionsOf(cfg)) > 0
}

// ShimOptionsOf returns the options of cfg that only the shim implements.
func ShimOptionsOf(cfg *Config) []string {
	var names []string
	for _, name := range cfg.Set {
		if shimOptions[name] {
			names = append(names, name)
		}
	}
	return names
}

// optionValue is the value of a malloc debug option given as a flag; it is
// checked when the option string is parsed.
type optionValue struct {
	kind  string
	value string
}

func (v *optionValue) String() string     { return v.value }
func (v *optionValue) Set(s string) error { v.value = s; return nil }
func (v *optionValue) Type() string       { return v.kind }

// ConfigOf parses the option string of flags and checks that it fits the
// mode and the other flags: the Config mdtrace runs with.
func ConfigOf(f *Flags) (*Config, error) {
	noShim := ""
	switch {
	case f.PID != 0:
		noShim = "-p"
	case f.Program != "":
		noShim = "--program"
	}
	cfg, err := ParseOptions(f.Options, noShim)
	if err == nil {
		err = CheckPreload(f, cfg)
	}
	if err == nil {
		err = CheckInterval(f, cfg)
	}
	if err == nil {
		err = CheckSampling(f, cfg)
	}
	if err == nil {
		err = CheckUnreachable(f, cfg)
	}
	if err == nil {
		err = CheckInject(f, cfg)
	}
	return cfg, err
}

// CheckUnreachable refuses the flags of the check for unreachable memory
// without the options they are about.
func CheckUnreachable(f *Flags, cfg *Config) error {
	switch {
	case f.UnreachableOnly && f.UnreachableFirst:
		return errors.New("--unreachable-first and --unreachable-only: choose one (the second leaves the reachable blocks out)")
	case f.UnreachableOnly && !cfg.Has(LeakTrack):
		return errors.New("--unreachable-only is about the leak report at exit: it needs the leak_track option")
	case f.UnreachableFirst && !cfg.Has(LeakTrack):
		return errors.New("--unreachable-first is about the leak report at exit: it needs the leak_track option")
	case f.MaxLeaks != 0 && !cfg.Has(LeakTrack):
		return errors.New("--max-leaks is about the leak report at exit: it needs the leak_track option")
	case f.UnreachableContents && !cfg.Has(CheckUnreachableOnSignal):
		return errors.New("--unreachable-contents is about the checks of signal 48: it needs the check_unreachable_on_signal option (mdtrace unreachable --contents asks for a check with contents)")
	}
	return nil
}

// injectOptions are the options --inject takes: those mdtrace applies from
// the calls the shim hands over. The shim loaded into a running process
// cannot give the blocks it did not allocate a header, and does not
// record each call's time.
var injectOptions = map[string]bool{
	"backtrace":              true,
	"backtrace_full":         true,
	"backtrace_dump_on_exit": true,
	"backtrace_dump_prefix":  true,
	"leak_track":             true,
	"verbose":                true,
}

// CheckInject refuses, with --inject, the options the shim loaded into a
// running process cannot serve.
func CheckInject(f *Flags, cfg *Config) error {
	if !f.Inject {
		return nil
	}
	for _, name := range cfg.Set {
		if !injectOptions[name] {
			return fmt.Errorf("option %s is not served with --inject, which takes only backtrace, backtrace_full, backtrace_dump_on_exit, backtrace_dump_prefix, leak_track and verbose (without --inject, -p probes the allocator for the others)", name)
		}
	}
	return nil
}
