# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#
# The cases of the checks: guards, the names of their frames, fills,
# expand_alloc, free_track, abort_on_error, alignment, threads, fork, C++
# and the option string.
# Sourced by run.sh, whose helpers and variables it uses.

run front_guard_corrupted "front_guard" 0 "$P" front_guard_corrupted <<EOF
$DIV
E +++ ALLOCATION P SIZE 100 HAS A CORRUPTED FRONT GUARD
E   allocation[-32] = 0x00 (expected 0xaa)
E   allocation[-15] = 0x02 (expected 0xaa)
E Backtrace at time of failure:
E FRAME
$DIV
EOF
frame front_guard_corrupted "malloc_debug:           #00  pc [0-9a-f]{16}  .*/md_test \(test_front_guard_corrupted\+[0-9]+\)$"
frame front_guard_corrupted "malloc_debug:           #01  pc [0-9a-f]{16}  .*/md_test \(main\+[0-9]+\)$"

# Frames named from .symtab (symbols.c): programs built without -rdynamic,
# PIE and not, corrupting a guard in one of their static functions or in a
# static function of a library, one after deleting its own file; then
# md_symbolize on its own (symbols_test.c).
build $CC -O0 -g -fno-omit-frame-pointer -fPIC -shared -Wall -Wextra -Werror -o "$T/libsymtest.so" \
	"$HERE/symbols_lib.c"
build $CC -O0 -g -fno-omit-frame-pointer -fPIE -pie -Wall -Wextra -Werror -o "$T/symbols_pie" \
	"$HERE/symbols_prog.c" -L"$T" -lsymtest -Wl,-rpath,"$T"
build $CC -O0 -g -fno-omit-frame-pointer -fno-PIE -no-pie -Wall -Wextra -Werror -o "$T/symbols_nopie" \
	"$HERE/symbols_prog.c" -L"$T" -lsymtest -Wl,-rpath,"$T"
sym_expected=$(cat <<EOF
$DIV
E +++ ALLOCATION P SIZE 100 HAS A CORRUPTED FRONT GUARD
E   allocation[-1] = 0x00 (expected 0xaa)
E Backtrace at time of failure:
E FRAME
$DIV
EOF
)
for p in pie nopie; do
	run "symbols_exe [$p]" "front_guard" 0 "$T/symbols_$p" exe <<EOF
$sym_expected
EOF
	frame "symbols_exe [$p]" "malloc_debug:           #00  pc [0-9a-f]{16}  .*/symbols_$p \(corrupt_in_exe\+[0-9]+\)$"
	frame "symbols_exe [$p]" "malloc_debug:           #01  pc [0-9a-f]{16}  .*/symbols_$p \(main\+[0-9]+\)$"
	run "symbols_lib [$p]" "front_guard" 0 "$T/symbols_$p" lib <<EOF
$sym_expected
EOF
	frame "symbols_lib [$p]" "malloc_debug:           #00  pc [0-9a-f]{16}  .*/libsymtest\.so \(lib_corrupt\+[0-9]+\)$"
	frame "symbols_lib [$p]" "malloc_debug:           #01  pc [0-9a-f]{16}  .*/libsymtest\.so \(symlib_corrupt\+[0-9]+\)$"
	frame "symbols_lib [$p]" "malloc_debug:           #02  pc [0-9a-f]{16}  .*/symbols_$p \(call_lib\+[0-9]+\)$"
	frame "symbols_lib [$p]" "malloc_debug:           #03  pc [0-9a-f]{16}  .*/symbols_$p \(main\+[0-9]+\)$"
done
cp "$T/symbols_pie" "$T/symbols_deleted"
run symbols_deleted "front_guard" 0 "$T/symbols_deleted" deleted <<EOF
$sym_expected
EOF
frame symbols_deleted "malloc_debug:           #00  pc [0-9a-f]{16}  .*/symbols_deleted \(corrupt_in_exe\+[0-9]+\)$"
frame symbols_deleted "malloc_debug:           #01  pc [0-9a-f]{16}  .*/symbols_deleted \(main\+[0-9]+\)$"

awk 'BEGIN { n = 3000
	for (i = 0; i < n; i++) printf "static __attribute__((noinline)) int f%d(int x) { return x * %d + %d; }\n", i, i + 3, i
	print "typedef int (*fn)(int);\nconst fn many_funcs[] = {"
	for (i = 0; i < n; i++) printf "\tf%d,\n", i
	printf "};\nconst int many_count = %d;\n", n }' >"$T/many.c"
build $CC -O0 -fPIC -shared -Wall -Wextra -Werror -o "$T/libmany.so" "$T/many.c"
stripped=-
if strip -o "$T/libsymtest_stripped.so" "$T/libsymtest.so" 2>/dev/null; then stripped="$T/libsymtest_stripped.so"; fi
build $CC -O2 -g -pthread -Wall -Wextra -Werror -o "$T/symbols_test" "$HERE/symbols_test.c" "$SHIM/symbols.c" \
	"$SHIM/symfile.c" "$SHIM/format.c" -ldl
mkdir "$T/symbols"
if "$T/symbols_test" "$T/libsymtest.so" "$T/libmany.so" "$stripped" "$T/symbols" >"$T/symbols.out" 2>&1; then
	pass symbols_unit
else
	cat "$T/symbols.out"
	fail symbols_unit
fi

# A rear guard overrun after a shrinking realloc reads as one on a new block.
rear_expected=$(cat <<EOF
$DIV
E +++ ALLOCATION P SIZE 100 HAS A CORRUPTED REAR GUARD
E   allocation[130] = 0xbf (expected 0xbb)
E   allocation[131] = 0x00 (expected 0xbb)
E Backtrace at time of failure:
E FRAME
$DIV
EOF
)
run rear_guard_corrupted "rear_guard" 0 "$P" rear_guard_corrupted <<EOF
$rear_expected
EOF

run rear_guard_shrink "rear_guard" 0 "$P" rear_guard_shrink <<EOF
$rear_expected
EOF

run both_guards_corrupted "guard" 0 "$P" both_guards_corrupted <<EOF
$DIV
E +++ ALLOCATION P SIZE 10 HAS A CORRUPTED FRONT GUARD
E   allocation[-1] = 0x01 (expected 0xaa)
E Backtrace at time of failure:
E FRAME
$DIV
$DIV
E +++ ALLOCATION P SIZE 10 HAS A CORRUPTED REAR GUARD
E   allocation[10] = 0x02 (expected 0xbb)
E   allocation[41] = 0x03 (expected 0xbb)
E Backtrace at time of failure:
E FRAME
$DIV
EOF

run tag_corrupted "rear_guard" 0 "$P" tag_corrupted <<EOF
$DIV
E +++ ALLOCATION P HAS INVALID TAG 1ee7d000 (malloc_usable_size)
E Backtrace at time of failure:
E FRAME
$DIV
$DIV
E +++ ALLOCATION P HAS INVALID TAG 1ee7d000 (realloc)
E Backtrace at time of failure:
E FRAME
$DIV
$DIV
E +++ ALLOCATION P HAS INVALID TAG 1ee7d000 (free)
E Backtrace at time of failure:
E FRAME
$DIV
EOF
frame tag_corrupted "malloc_debug:           #00  pc [0-9a-f]{16}  .*/md_test \(test_tag_corrupted\+[0-9]+\)$"

for o in "guard" "front_guard=17 fill" "rear_guard=7 expand_alloc=5" "guard=64 fill free_track=3"; do
	run "guard_realloc [$o]" "$o" 0 "$P" guard_realloc </dev/null
done
for o in "guard expand_alloc" "rear_guard=7 expand_alloc=5" "guard fill expand_alloc=16384"; do
	run "guard_realloc_shrink [$o]" "$o" 0 "$P" guard_realloc_shrink </dev/null
done

# Another allocator preloaded after the shim, as when mdtrace puts the shim
# first for a memory option and the program preloads its own: the shim's
# blocks stay glibc's (jemalloc) or that allocator's (tcmalloc, which also
# defines __libc_malloc), and the shim asks that allocator their usable
# size. Asking jemalloc about glibc's blocks crashed guard's calloc.
for lib in /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4; do
	if [ ! -e "$lib" ]; then
		echo "SKIP usable_calloc after $(basename "$lib"): not installed (make deps installs it as root)"
		continue
	fi
	for o in "guard" "front_guard" "fill" "guard fill free_track=10"; do
		AFTER_SHIM=$lib run "usable_calloc [$o] after $(basename "$lib")" "$o" 0 "$P" usable_calloc </dev/null
	done
	AFTER_SHIM=$lib run "calloc_overrun [rear_guard] after $(basename "$lib")" "rear_guard" 0 "$P" calloc_overrun <<EOF
$DIV
E +++ ALLOCATION P SIZE 10 HAS A CORRUPTED REAR GUARD
E   allocation[10] = 0x5a (expected 0xbb)
E Backtrace at time of failure:
E FRAME
$DIV
EOF
done
for o in "guard" "front_guard" "fill"; do
	run "usable_calloc [$o]" "$o" 0 "$P" usable_calloc </dev/null
done

# Guards of every length the checks treat apart (under 16 bytes, 16 to 128,
# over 128): each byte corrupted alone is reported, and nothing else.
for g in 1 7 15 16 17 31 32 33 48 63 64 65 127 128 129 200; do
	front=$(((g + 15) / 16 * 16))
	{
		for k in $(seq 0 $((g - 1))); do
			printf '%s\nE +++ ALLOCATION P SIZE 37 HAS A CORRUPTED REAR GUARD\n' "$DIV"
			printf 'E   allocation[%d] = 0xba (expected 0xbb)\n' $((37 + k))
			printf 'E Backtrace at time of failure:\nE FRAME\n%s\n' "$DIV"
		done
		for k in $(seq 0 $((front - 1))); do
			printf '%s\nE +++ ALLOCATION P SIZE 37 HAS A CORRUPTED FRONT GUARD\n' "$DIV"
			printf 'E   allocation[%d] = 0xab (expected 0xaa)\n' $((-1 - k))
			printf 'E Backtrace at time of failure:\nE FRAME\n%s\n' "$DIV"
		done
	} >"$T/every_byte.want"
	MD_TEST_GUARD=$g run "guard_every_byte [guard=$g]" "guard=$g" 0 "$P" guard_every_byte <"$T/every_byte.want"
done
for o in "fill" "guard fill" "guard=7 fill" "guard=200 fill"; do
	run "fill_every_size [$o]" "$o" 0 "$P" fill_every_size </dev/null
done

run huge "guard fill_on_free" 0 "$P" huge </dev/null
run huge_no_header "fill" 0 "$P" huge </dev/null

run fill_on_alloc "fill_on_alloc" 0 "$P" fill_on_alloc </dev/null
run "fill_on_alloc [guard]" "fill guard" 0 "$P" fill_on_alloc </dev/null
run fill_on_alloc_partial "fill_on_alloc=25" 0 "$P" fill_on_alloc_partial </dev/null
run fill_on_free "fill_on_free free_track=10" 0 "$P" fill_on_free </dev/null
run fill_on_free_partial "fill_on_free=30 free_track=10" 0 "$P" fill_on_free_partial </dev/null
run expand_alloc "expand_alloc=1024" 0 "$P" expand_alloc </dev/null
run "expand_alloc [front_guard]" "expand_alloc=1024 front_guard" 0 "$P" expand_alloc </dev/null

# The same evictions report the same bytes with and without a header.
uaf_expected=$(cat <<EOF
$DIV
E +++ ALLOCATION P0 USED AFTER FREE
E   allocation[20] = 0xaf (expected 0xef)
E   allocation[99] = 0x12 (expected 0xef)
$DIV
$DIV
E +++ ALLOCATION P3 USED AFTER FREE
E   allocation[3] = 0x34 (expected 0xef)
$DIV
$DIV
E +++ ALLOCATION L1 USED AFTER FREE
E   allocation[4095] = 0x90 (expected 0xef)
E   allocation[4100] = 0x56 (expected 0xef)
E   allocation[8191] = 0x00 (expected 0xef)
$DIV
$DIV
E +++ ALLOCATION L2 USED AFTER FREE
E   allocation[8200] = 0x78 (expected 0xef)
$DIV
done
EOF
)
run free_track_use_after_free "free_track=5 free_track_backtrace_num_frames=0" 0 "$P" free_track_use_after_free <<EOF
$uaf_expected
EOF
run "free_track_use_after_free [guard]" "guard free_track=5 free_track_backtrace_num_frames=0" 0 "$P" free_track_use_after_free <<EOF
$uaf_expected
EOF

run free_track_finalize "free_track" 0 "$P" free_track_finalize <<EOF
exiting
$DIV
E +++ ALLOCATION P USED AFTER FREE
E   allocation[10] = 0x01 (expected 0xef)
E   allocation[50] = 0x02 (expected 0xef)
E Backtrace at time of free:
E FRAME
$DIV
EOF
frame free_track_finalize "malloc_debug:           #00  pc [0-9a-f]{16}  .*/md_test \(test_free_track_finalize\+[0-9]+\)$"

run free_track_double_free "free_track=100 rear_guard" 0 "$P" free_track_double_free <<EOF
$DIV
E +++ ALLOCATION P USED AFTER FREE (free)
E Backtrace of original free:
E FRAME
E Backtrace at time of failure:
E FRAME
$DIV
EOF
frame free_track_double_free "malloc_debug:           #00  pc [0-9a-f]{16}  .*/md_test \(test_free_track_double_free\+[0-9]+\)$"

run free_track_realloc_freed "free_track guard" 0 "$P" free_track_realloc_freed <<EOF
$DIV
E +++ ALLOCATION P USED AFTER FREE (realloc)
E Backtrace of original free:
E FRAME
E Backtrace at time of failure:
E FRAME
$DIV
EOF

run free_track_header_tag_corrupted "free_track=100 free_track_backtrace_num_frames=0 rear_guard" 0 "$P" free_track_header_tag_corrupted <<EOF
$DIV
E +++ ALLOCATION P HAS CORRUPTED HEADER TAG 0x1cc7dc00 AFTER FREE
$DIV
EOF

run free_track_modified_partial "free_track=4 fill_on_free=2 free_track_backtrace_num_frames=0" 0 "$P" free_track_modified_partial <<EOF
$DIV
E +++ ALLOCATION P USED AFTER FREE
E   allocation[0] = 0x00 (expected 0xef)
E   allocation[1] = 0x00 (expected 0xef)
$DIV
EOF

# abort_on_error: the block is written, then the process dies of SIGABRT.
{
	(LIBC_DEBUG_MALLOC_OPTIONS="front_guard abort_on_error" LD_PRELOAD="$T/libmdshim.so" \
		exec "$P" abort >"$T/abort2.out" 2>"$T/abort2.err")
	st=$?
} 2>/dev/null
normalize "$T/abort2.err" "$T/abort2.out" "$P" >"$T/abort2.got"
cat >"$T/abort2.want" <<EOF
$DIV
E +++ ALLOCATION P SIZE 100 HAS A CORRUPTED FRONT GUARD
E   allocation[-1] = 0x00 (expected 0xaa)
E Backtrace at time of failure:
E FRAME
$DIV
EOF
if kill -l $((st - 128)) 2>/dev/null | grep -q ABRT && diff -u "$T/abort2.want" "$T/abort2.got"; then
	pass abort_on_error_output
else
	echo "  status $st"
	fail abort_on_error_output
fi

for o in "guard" "front_guard=17" "rear_guard=7" "expand_alloc=3 fill" "free_track=20" "guard=48 fill free_track" ""; do
	run "alignment [$o]" "$o" 0 "$P" alignment </dev/null
done

run threads "guard fill free_track" 0 "$P" threads <<EOF
threads done
EOF
run fork "guard fill free_track" 0 "$P" fork <<EOF
forks done
EOF

run cxx "guard fill free_track" 0 "$T/cxx_test" <<EOF
cxx done
EOF
for opts in "guard fill" ""; do
	run "cxx_fail [$opts]" "$opts" 0 "$T/cxx_test" fail <<EOF
new(huge): bad_alloc
new[](huge, 64): new_handler called 2 times, then bad_alloc
nothrow: null null
new(0): two blocks
new(100, 4096): aligned
EOF
done
# The shim hands its operators over to the program's own.
for opts in "guard fill" ""; do
	run "replaced new [$opts]" "$opts" 0 "$T/pool_test" <<EOF
new: pool, new[]: pool
pool done
EOF
done
run cxx_corrupt "guard" 0 "$T/cxx_test" corrupt <<EOF
$DIV
E +++ ALLOCATION P SIZE 100 HAS A CORRUPTED FRONT GUARD
E   allocation[-1] = 0x00 (expected 0xaa)
E Backtrace at time of failure:
E FRAME
$DIV
EOF

run option_error "guard=xx backtrace" 0 "$P" plain <<EOF
E PROG: bad value for option 'guard'
E For malloc debug option descriptions go to:
E   https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md
ran
EOF
run option_unknown "fill bogus guard" 0 "$P" plain <<EOF
E PROG: unknown option bogus
E For malloc debug option descriptions go to:
E   https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md
ran
EOF
# The header carries today's UTC date, the process id and the thread id.
today=$(date -u +%m-%d)
if grep -Eq "^$today [0-9:.]{12} [ 0-9]{4}[0-9] [ 0-9]{4}[0-9] E malloc_debug: " "$T/option_error.err" ||
	[ "$(date -u +%m-%d)" != "$today" ]; then
	pass "log header date"
else
	head -1 "$T/option_error.err"
	fail "log header date"
fi

run verbose "verbose guard" 0 "$P" plain <<EOF
I PROG: malloc debug enabled
ran
EOF
# Without mdtrace, the options that need its tracking are said not to apply.
run unimplemented_options "backtrace leak_track record_allocs=10 verify_pointers" 0 "$P" plain <<EOF
E PROG: malloc debug: backtrace leak_track record_allocs not applied: the preloaded library alone does not track allocations (run the program under mdtrace)
ran
EOF
run disabled "" 0 "$P" plain <<EOF
ran
EOF
