// Package stacks turns the addresses of a backtrace into frames a developer
// can read: it parses /proc/PID/maps snapshots, reads ELF symbol tables
// (PIE-aware), and computes the map-relative pc that Android's malloc debug
// prints.
//
// Resolvers are chained behind the Resolver interface so that further sources
// of names (debug files, MiniDebugInfo, debuginfod caches) plug in without
// changing callers. The package needs no kernel and is safe to test with
// fixtures.
package stacks
