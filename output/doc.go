// Package output writes, byte for byte as Android's malloc debug does, the
// files and log lines mdtrace produces, and parses the file formats back.
//
// It covers:
//
//   - malloc_debug log lines in logcat's "threadtime" layout (Log);
//   - backtrace lines, in the normal and the backtrace_full variants
//     (FormatFrame, FormatFrameFull);
//   - the leak_track report at exit (LeakReport);
//   - Android Native Heap Dumps: written as v1.2 (WriteHeapDump,
//     BuildFingerprint) and parsed in versions v1.0 to v1.2 (ParseHeapDump);
//   - safe creation of output files by a process running as root
//     (WriteFileAtomic).
//
// The package needs no kernel: it works on snapshots of package leak and on
// frames resolved by package stacks, and is tested with golden files in
// testdata/golden.
package output
