// Package session is one run of mdtrace: it loads the probes, launches a
// command, attaches to a process or watches for a program (program mode),
// or audits every process (--all); follows the traced processes' forks,
// execs, libraries and exits; acts on Android's malloc debug signals and
// the shim's control channel; and writes what the options ask for, through
// leak/ and output/, with every loss counted and said.
//
// The files by concern: session.go (Run and its loop), launch.go (the
// launched command's environment and shim), procs.go (the traced
// processes' lives), libraries.go (their mapped files), signals.go,
// reports.go (exit reports, dumps, losses), verify.go (pointer errors),
// records.go (record_allocs), stats.go, top.go, program.go, all.go.
package session
