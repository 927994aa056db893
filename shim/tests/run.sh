#!/bin/sh
# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#
# Tests of libmdshim.so. Builds the library and the test programs with cc
# into a temporary directory, runs each case under LD_PRELOAD with its
# LIBC_DEBUG_MALLOC_OPTIONS and compares stderr, normalized, with the exact
# expected lines. Normalization: the logcat header becomes its priority
# letter, the pointers a workload names on stdout become their names, the
# program path becomes PROG and each run of backtrace frame lines becomes
# one "E FRAME" line. Prints "N passed, N failed"; exits 1 on any failure.
#
# Usage: sh shim/tests/run.sh   (from anywhere; CC and CXX are honoured)

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SHIM=$(dirname "$HERE")
ROOT=$(dirname "$SHIM")
CC=${CC:-cc}
CXX=${CXX:-c++}
T=$(mktemp -d "${TMPDIR:-/tmp}/mdshim-test.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM

passed=0
failed=0

pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

build() {
	"$@" >"$T/build.log" 2>&1 || { cat "$T/build.log"; echo "build failed: $*"; exit 1; }
}
build $CC -shared -fPIC -Wl,-z,now -O2 -g -fexceptions -fno-omit-frame-pointer -fno-optimize-sibling-calls -Wall -Wextra -Werror -o "$T/libmdshim.so" "$SHIM"/*.c
build $CC -O2 -g -Wall -Wextra -Werror -o "$T/config_test" "$HERE/config_test.c" "$SHIM/config.c" \
	"$SHIM/format.c"
build $CC -O2 -g -Wall -Wextra -Werror -o "$T/format_test" "$HERE/format_test.c" "$SHIM/format.c"
build $CC -O2 -g -pthread -Wall -Wextra -Werror -o "$T/ptrtab_test" "$HERE/ptrtab_test.c" "$SHIM/ptrtab.c"
build $CC -O2 -g -pthread -Wall -Wextra -Werror -o "$T/sample_test" "$HERE/sample_test.c" "$SHIM/sample.c" \
	"$SHIM/ptrtab.c" -lm
# The hooks with a model of the probes in place of the sites (site.c).
build $CC -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -pthread -Wall -Wextra -Werror \
	-o "$T/sample_hooks_test" "$HERE/sample_hooks_test.c" "$HERE/site_model.c" \
	$(ls "$SHIM"/*.c | grep -v '/site\.c$') -lm
# The batched sites with the same model.
build $CC -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -rdynamic -pthread -Wall -Wextra -Werror \
	-o "$T/batch_hooks_test" "$HERE/batch_hooks_test.c" "$HERE/site_model.c" \
	$(ls "$SHIM"/*.c | grep -v '/site\.c$') -lm -ldl
build $CC -O0 -g -fno-omit-frame-pointer -rdynamic -pthread -Wall -Wextra -Werror \
	-o "$T/md_test" "$HERE"/md_test*.c
build $CXX -O1 -g -std=c++17 -Wall -Wextra -Werror -o "$T/cxx_test" "$HERE/cxx_test.cc"
# A program whose own library replaces operator new and delete.
build $CXX -O1 -g -shared -fPIC -Wall -Wextra -Werror -o "$T/libnewpool.so" "$HERE/newpool.cc"
build $CXX -O1 -g -Wall -Wextra -Werror -o "$T/pool_test" "$HERE/pool_test.cc" -L"$T" -lnewpool -Wl,-rpath,"$T"

# The C parser against the shared cases.
if "$T/config_test" "$ROOT/testdata/options_cases.txt" >"$T/config.out" 2>&1; then
	pass options_cases
else
	cat "$T/config.out"
	fail options_cases
fi

# The log formatter against the C library's snprintf.
if "$T/format_test" >"$T/format.out" 2>&1; then
	pass format_cases
else
	cat "$T/format.out"
	fail format_cases
fi

# The sampler: its rate by size, from one thread and from eight; the sampled set.
if "$T/sample_test" >"$T/sample.out" 2>&1; then
	pass sample
else
	cat "$T/sample.out"
	fail sample
fi

# What reaches the sites: every call without sampling; with it, a sample of
# the blocks at the expected rate, and the frees of those blocks only.
for mode in off on on:guard; do
	if (
		unset MDSHIM_SAMPLE_BYTES LIBC_DEBUG_MALLOC_OPTIONS
		case $mode in
		on*) export MDSHIM_SAMPLE_BYTES=4096 ;;
		esac
		case $mode in
		*:guard) export LIBC_DEBUG_MALLOC_OPTIONS=guard ;;
		esac
		"$T/sample_hooks_test" "${mode%:*}"
	) >"$T/hooks.out" 2>&1; then
		pass "sample_hooks $mode"
	else
		cat "$T/hooks.out"
		fail "sample_hooks $mode"
	fi
done

# The batched sites: held frees, exact hand-over, frames, threads' ends.
if MDSHIM_BATCH=16 MDSHIM_CTL=/nonexistent LIBC_DEBUG_MALLOC_OPTIONS=backtrace "$T/batch_hooks_test" >"$T/batch.out" 2>&1; then
	pass batch_hooks
else
	cat "$T/batch.out"
	fail batch_hooks
fi

# The pointer table against a reference model, from one thread and from eight.
if "$T/ptrtab_test" >"$T/ptrtab.out" 2>&1; then
	pass ptrtab
else
	cat "$T/ptrtab.out"
	fail ptrtab
fi

DIV='E *** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***'
HDR='^[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9][0-9][0-9] [ 0-9]{4}[0-9] [ 0-9]{4}[0-9] [EI] malloc_debug: '

# normalize ERRFILE OUTFILE PROG
normalize() {
	sedscript="$T/names.sed"
	: >"$sedscript"
	grep -E '^[A-Z][A-Z0-9_]*=0x[0-9a-f]+$' "$2" | while IFS== read -r name value; do
		printf 's/%s\\b/%s/g\n' "$value" "$name" >>"$sedscript"
	done
	sed -E -e "s/$HDR/&/" "$1" |
		sed -E -e "s/^[0-9][0-9]-[0-9][0-9] [0-9:.]{12} [ 0-9]{4}[0-9] [ 0-9]{4}[0-9] ([EI]) malloc_debug: /\\1 /" \
			-e 's/^E {11}#[0-9]{2}  pc [0-9a-f]{16}  .*$/E FRAME/' \
			-e "s|$3|PROG|g" |
		sed -f "$sedscript" |
		awk '!($0 == "E FRAME" && prev == "E FRAME") { print } { prev = $0 }'
}

# run NAME OPTIONS WANT_STATUS PROGRAM [ARGS...] <<EXPECTED
run() {
	name=$1 opts=$2 want_status=$3
	shift 3
	cat >"$T/$name.want"
	timeout 120 env LIBC_DEBUG_MALLOC_OPTIONS="$opts" LD_PRELOAD="$T/libmdshim.so${AFTER_SHIM:+:$AFTER_SHIM}" "$@" \
		>"$T/$name.out" 2>"$T/$name.err"
	status=$?
	normalize "$T/$name.err" "$T/$name.out" "$1" >"$T/$name.got"
	ok=1
	if [ "$status" != "$want_status" ]; then
		echo "  exit status $status, want $want_status"
		ok=0
	fi
	# Every library line carries a well-formed header.
	if grep -v '^FAIL' "$T/$name.err" | grep 'malloc_debug:' | grep -Evq "$HDR"; then
		echo "  malformed log header:"
		grep 'malloc_debug:' "$T/$name.err" | grep -Ev "$HDR" | head -3
		ok=0
	fi
	if ! diff -u "$T/$name.want" "$T/$name.got" >"$T/$name.diff"; then
		cat "$T/$name.diff"
		ok=0
	fi
	if [ $ok = 1 ]; then pass "$name"; else fail "$name"; fi
}

# frame NAME REGEX: the raw output of case NAME has a frame line matching REGEX.
frame() {
	if grep -Eq "$2" "$T/$1.err"; then
		pass "$1 frames"
	else
		echo "  no frame line matching: $2"
		grep -E '#[0-9]{2}  pc' "$T/$1.err" | head -5
		fail "$1 frames"
	fi
}

P="$T/md_test"
FR='E           #[0-9]{2}  pc [0-9a-f]{16}  '

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
run unimplemented_options "backtrace leak_track record_allocs=10 verify_pointers" 0 "$P" plain <<EOF
ran
EOF
run disabled "" 0 "$P" plain <<EOF
ran
EOF

# verify_pointers: free, realloc and malloc_usable_size of a pointer the
# allocator does not hold live report UNKNOWN POINTER and do nothing
# (Android's verify_pointers test: three blocks).
unknown_expected=$(cat <<EOF
$DIV
E +++ ALLOCATION P UNKNOWN POINTER (free)
E Backtrace at time of failure:
E FRAME
$DIV
$DIV
E +++ ALLOCATION P UNKNOWN POINTER (malloc_usable_size)
E Backtrace at time of failure:
E FRAME
$DIV
$DIV
E +++ ALLOCATION P UNKNOWN POINTER (realloc)
E Backtrace at time of failure:
E FRAME
$DIV
EOF
)
run verify_pointers "verify_pointers" 0 "$P" verify_pointers <<EOF
$unknown_expected
EOF
frame verify_pointers "malloc_debug:           #00  pc [0-9a-f]{16}  .*/md_test \(test_verify_pointers\+[0-9]+\)$"
frame verify_pointers "malloc_debug:           #01  pc [0-9a-f]{16}  .*/md_test \(main\+[0-9]+\)$"

# With a header its tag is checked first (free_track keeps the freed header).
run "verify_pointers [rear_guard free_track]" "verify_pointers rear_guard free_track" 0 "$P" verify_pointers <<EOF
$DIV
E +++ ALLOCATION P USED AFTER FREE (free)
E Backtrace of original free:
E FRAME
E Backtrace at time of failure:
E FRAME
$DIV
$DIV
E +++ ALLOCATION P USED AFTER FREE (malloc_usable_size)
E Backtrace of original free:
E FRAME
E Backtrace at time of failure:
E FRAME
$DIV
$DIV
E +++ ALLOCATION P USED AFTER FREE (realloc)
E Backtrace of original free:
E FRAME
E Backtrace at time of failure:
E FRAME
$DIV
EOF

run verify_pointers_interior "verify_pointers" 0 "$P" verify_pointers_interior <<EOF
$DIV
E +++ ALLOCATION Q UNKNOWN POINTER (free)
E Backtrace at time of failure:
E FRAME
$DIV
$DIV
E +++ ALLOCATION Q UNKNOWN POINTER (malloc_usable_size)
E Backtrace at time of failure:
E FRAME
$DIV
$DIV
E +++ ALLOCATION S UNKNOWN POINTER (free)
E Backtrace at time of failure:
E FRAME
$DIV
EOF
frame verify_pointers_interior "malloc_debug:           #00  pc [0-9a-f]{16}  .*/md_test \(test_verify_pointers_interior\+[0-9]+\)$"

run verify_pointers_realloc_moved "verify_pointers" 0 "$P" verify_pointers_realloc_moved <<EOF
$DIV
E +++ ALLOCATION P UNKNOWN POINTER (free)
E Backtrace at time of failure:
E FRAME
$DIV
EOF

# With a header, a copy of a live block's header elsewhere has the right
# tag but is not a live block: UNKNOWN POINTER, as from the table.
run guard_forged_header "guard" 0 "$P" guard_forged_header <<EOF
$unknown_expected
EOF
frame guard_forged_header "malloc_debug:           #00  pc [0-9a-f]{16}  .*/md_test \(test_guard_forged_header\+[0-9]+\)$"

# With free_track the block names the free that let the pointer go.
run verify_pointers_free_track "verify_pointers free_track" 0 "$P" free_track_double_free <<EOF
$DIV
E +++ ALLOCATION P UNKNOWN POINTER (free)
E Backtrace of original free:
E FRAME
E Backtrace at time of failure:
E FRAME
$DIV
EOF
frame verify_pointers_free_track "malloc_debug:           #00  pc [0-9a-f]{16}  .*/md_test \(test_free_track_double_free\+[0-9]+\)$"

run verify_pointers_free_track_realloc "verify_pointers free_track" 0 "$P" free_track_realloc_freed <<EOF
$DIV
E +++ ALLOCATION P UNKNOWN POINTER (realloc)
E Backtrace of original free:
E FRAME
E Backtrace at time of failure:
E FRAME
$DIV
EOF

# free_track without a guard: the second free is caught (free_track sets
# TRACK_ALLOCS, as on Android) and skipped, so the block reaches glibc once
# when it is evicted.
run free_track_double_free_no_guard "free_track" 0 "$P" free_track_double_free_churn <<EOF
$DIV
E +++ ALLOCATION P UNKNOWN POINTER (free)
E Backtrace of original free:
E FRAME
E Backtrace at time of failure:
E FRAME
$DIV
done
EOF
frame free_track_double_free_no_guard "malloc_debug:           #00  pc [0-9a-f]{16}  .*/md_test \(test_free_track_double_free_churn\+[0-9]+\)$"
run "free_track_double_free_no_guard [no frames]" "free_track=10 free_track_backtrace_num_frames=0" 0 "$P" free_track_double_free_churn <<EOF
$DIV
E +++ ALLOCATION P UNKNOWN POINTER (free)
E Backtrace at time of failure:
E FRAME
$DIV
done
EOF

# abort_on_error: the first block, then SIGABRT.
{
	(LIBC_DEBUG_MALLOC_OPTIONS="verify_pointers abort_on_error" LD_PRELOAD="$T/libmdshim.so" \
		exec "$P" verify_pointers >"$T/verify_abort.out" 2>"$T/verify_abort.err")
	st=$?
} 2>/dev/null
normalize "$T/verify_abort.err" "$T/verify_abort.out" "$P" >"$T/verify_abort.got"
cat >"$T/verify_abort.want" <<EOF
$DIV
E +++ ALLOCATION P UNKNOWN POINTER (free)
E Backtrace at time of failure:
E FRAME
$DIV
EOF
if [ "$st" = 134 ] && diff -u "$T/verify_abort.want" "$T/verify_abort.got"; then
	pass verify_pointers_abort_on_error
else
	echo "  status $st, want 134"
	fail verify_pointers_abort_on_error
fi

# Correct programs report nothing: tens of thousands of live blocks, every
# entry point, glibc's own allocations, threads, fork and C++.
run verify_clean "verify_pointers" 0 "$P" verify_clean <<EOF
clean done
EOF
run "verify_clean [guard fill free_track]" "verify_pointers guard fill free_track" 0 "$P" verify_clean <<EOF
clean done
EOF
run "alignment [verify_pointers]" "verify_pointers" 0 "$P" alignment </dev/null
run "huge [verify_pointers]" "verify_pointers" 0 "$P" huge </dev/null
run "guard_realloc [verify_pointers expand_alloc]" "verify_pointers expand_alloc=5" 0 "$P" guard_realloc </dev/null
run "threads [verify_pointers]" "verify_pointers" 0 "$P" threads <<EOF
threads done
EOF
run "fork [verify_pointers]" "verify_pointers" 0 "$P" fork <<EOF
forks done
EOF
run "cxx [verify_pointers]" "verify_pointers" 0 "$T/cxx_test" <<EOF
cxx done
EOF
run verify_stress "verify_pointers free_track guard fill" 0 "$P" verify_stress <<EOF
stress done
EOF
run "verify_stress [verify_pointers]" "verify_pointers" 0 "$P" verify_stress <<EOF
stress done
EOF

# ---- the control channel (ctl.c): get_malloc_leak_info and the signals ----
build $CC -O0 -g -fno-omit-frame-pointer -fno-inline -rdynamic -Wall -Wno-unused-result \
	-o "$T/leakinfo" "$ROOT/testdata/leakinfo.c"

# ctl_run NAME OPTIONS CTL PROGRAM [ARGS...] <<EXPECTED: as run, with
# MDSHIM_CTL=CTL unless CTL is empty, and two more normalizations: the pid
# the workload prints as "pid=N" becomes PID in the "kill" lines, and
# malloc_info's XML becomes one "I XML" line.
ctl_run() {
	name=$1 opts=$2 ctl=$3
	shift 3
	cat >"$T/$name.want"
	timeout 120 env LIBC_DEBUG_MALLOC_OPTIONS="$opts" LD_PRELOAD="$T/libmdshim.so" ${ctl:+MDSHIM_CTL=$ctl} \
		"$@" >"$T/$name.out" 2>"$T/$name.err" </dev/null
	ctl_check "$name" $? 0 "$1"
}

# ctl_check NAME STATUS WANT_STATUS PROGRAM: compares the output of case NAME.
ctl_check() {
	pid=$(sed -n 's/^pid=//p' "$T/$1.out")
	normalize "$T/$1.err" "$T/$1.out" "$4" |
		sed -e "s/'kill -\([0-9]*\) ${pid:-PID}'/'kill -\1 PID'/" \
			-e '/^I <malloc version="1">$/,/^I <\/malloc>$/c\
I XML' >"$T/$1.got"
	ok=1
	if [ "$2" != "$3" ]; then
		echo "  exit status $2, want $3"
		ok=0
	fi
	if grep 'malloc_debug:' "$T/$1.err" | grep -Evq "$HDR"; then
		echo "  malformed log header"
		ok=0
	fi
	if ! diff -u "$T/$1.want" "$T/$1.got"; then
		ok=0
	fi
	if [ $ok = 1 ]; then pass "$1"; else fail "$1"; fi
}

LI_NULL='E get_malloc_leak_info: At least one invalid parameter.'
LI_UNTRACKED="E get_malloc_leak_info: Allocations not being tracked, to enable set the option 'backtrace'."
LI_ZEROS='overall_size=0 info_size=0 total_memory=0 backtrace_size=0 entries=0
null_check=ok'

# li_stdout NAME: leakinfo printed zeros and kept the outputs of the NULL call.
li_stdout() {
	if [ "$(cat "$T/$1.out")" = "$LI_ZEROS" ]; then
		pass "$1 stdout"
	else
		cat "$T/$1.out"
		fail "$1 stdout"
	fi
}

# Without mdtrace: all zero, no line but the NULL argument's.
run leak_info_no_mdtrace "backtrace" 0 "$T/leakinfo" <<EOF
$LI_NULL
EOF
li_stdout leak_info_no_mdtrace
run "leak_info_no_mdtrace [guard backtrace_enable_on_signal]" "guard backtrace_enable_on_signal" 0 "$T/leakinfo" <<EOF
$LI_NULL
EOF
li_stdout "leak_info_no_mdtrace [guard backtrace_enable_on_signal]"
run leak_info_no_backtrace "guard leak_track" 0 "$T/leakinfo" <<EOF
$LI_UNTRACKED
$LI_NULL
EOF
li_stdout leak_info_no_backtrace
run leak_info_no_options "" 0 "$T/leakinfo" <<EOF
$LI_UNTRACKED
$LI_NULL
EOF
li_stdout leak_info_no_options
# A named socket nobody listens on: one line with the reason.
ctl_run leak_info_dead_socket "backtrace" mdshim.test.dead "$T/leakinfo" <<EOF
E get_malloc_leak_info: cannot connect to mdtrace (MDSHIM_CTL=mdshim.test.dead): Connection refused
$LI_NULL
EOF
li_stdout leak_info_dead_socket

# Android's verbose lines, in Android's order, with the process's pid.
ctl_run signals_verbose "verbose backtrace_enable_on_signal record_allocs=10 log_allocator_stats_on_signal check_unreachable_on_signal guard" "" "$P" ctl_pid <<EOF
I PROG: Run: 'kill -45 PID' to enable backtracing.
I PROG: Run: 'kill -47 PID' to dump the backtrace.
I PROG: Run: 'kill -46 PID' to dump the allocation records.
I PROG: Run: 'kill -49 PID' to log allocator stats.
I PROG: Run: 'kill -48 PID' to check for unreachable memory.
I PROG: malloc debug enabled
ran
EOF
ctl_run signals_verbose_backtrace "bt=8 verbose fill" "" "$P" ctl_pid <<EOF
I PROG: Run: 'kill -47 PID' to dump the backtrace.
I PROG: malloc debug enabled
ran
EOF
ctl_run signals_not_verbose "backtrace_enable_on_signal record_allocs log_allocator_stats_on_signal check_unreachable_on_signal guard" "" "$P" ctl_pid <<EOF
ran
EOF

# 49: the next malloc or free logs glibc's malloc_info.
ctl_run log_allocator_stats_on_signal "log_allocator_stats_on_signal guard" "" "$P" ctl_stats <<EOF
I Logging allocator stats...
I XML
raised 49
EOF
ctl_run log_allocator_stats_on_exit "log_allocator_stats_on_exit fill" "" "$P" ctl_pid <<EOF
ran
I Logging allocator stats...
I XML
EOF
# After free_track's exit checks, as Android's debug_finalize.
ctl_run "log_allocator_stats_on_exit [free_track]" "log_allocator_stats_on_exit free_track" "" "$P" free_track_finalize <<EOF
exiting
$DIV
E +++ ALLOCATION P USED AFTER FREE
E   allocation[10] = 0x01 (expected 0xef)
E   allocation[50] = 0x02 (expected 0xef)
E Backtrace at time of free:
E FRAME
$DIV
I Logging allocator stats...
I XML
EOF

# Without mdtrace, 45 to 48 do not kill the process: each is logged as
# ignored on the next malloc or free.
ctl_sig_ignored=$(cat <<EOF
E Signal 45 ignored: toggling backtraces needs mdtrace (the backtrace_enable_on_signal option is tracked by mdtrace)
raised 45
E Signal 46 ignored: writing the allocation records needs mdtrace (the record_allocs option is recorded by mdtrace)
raised 46
E Signal 47 ignored: dumping the heap needs mdtrace (the backtrace option is tracked by mdtrace)
raised 47
E Signal 48 ignored: checking for unreachable memory needs mdtrace (the check_unreachable_on_signal option is run by mdtrace)
raised 48
I Logging allocator stats...
I XML
raised 49
EOF
)
ctl_run signals_no_mdtrace "bt_en_on_sig record_allocs check_unreachable_on_signal log_allocator_stats_on_signal guard" "" "$P" ctl_signals <<EOF
$ctl_sig_ignored
EOF
# A named socket nobody listens on: the handlers cannot pass the signal on.
ctl_run signals_dead_socket "bt_en_on_sig record_allocs check_unreachable_on_signal log_allocator_stats_on_signal guard" mdshim.test.dead "$P" ctl_signals <<EOF
E Signal 45 not passed to mdtrace (MDSHIM_CTL=mdshim.test.dead): Connection refused
raised 45
E Signal 46 not passed to mdtrace (MDSHIM_CTL=mdshim.test.dead): Connection refused
raised 46
E Signal 47 not passed to mdtrace (MDSHIM_CTL=mdshim.test.dead): Connection refused
raised 47
E Signal 48 not passed to mdtrace (MDSHIM_CTL=mdshim.test.dead): Connection refused
raised 48
I Logging allocator stats...
I XML
raised 49
EOF

# kill -47 from outside a process with the backtrace option: it survives.
rm -f "$T/kill47.fifo" && mkfifo "$T/kill47.fifo"
LIBC_DEBUG_MALLOC_OPTIONS="backtrace" LD_PRELOAD="$T/libmdshim.so" "$P" ctl_wait <"$T/kill47.fifo" >"$T/kill47.out" 2>"$T/kill47.err" &
k47=$!
exec 9>"$T/kill47.fifo"
i=0
while ! grep -q '^ready$' "$T/kill47.out" && [ $i -lt 600 ]; do
	sleep 0.05
	i=$((i + 1))
done
kill -47 $k47
echo go >&9
exec 9>&-
wait $k47
st=$?
cat >"$T/kill47.want" <<EOF
E Signal 47 ignored: dumping the heap needs mdtrace (the backtrace option is tracked by mdtrace)
ran
EOF
ctl_check kill47 $st 0 "$P"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
