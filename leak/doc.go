// Package leak models the live allocations of a traced process: the
// allocation table as Android's malloc debug keeps it, its sort order, the
// grouping of allocations by (zygote, size, backtrace) used by heap dumps and
// get_malloc_leak_info, and the total live memory.
//
// The package needs no kernel: it works on snapshots that the tracer reads
// from the BPF maps, or on fixtures in tests.
package leak
