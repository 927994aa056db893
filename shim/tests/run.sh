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
build $CC -shared -fPIC -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -Wall -Wextra -Werror -o "$T/libmdshim.so" "$SHIM"/*.c
build $CC -O2 -g -Wall -Wextra -Werror -o "$T/config_test" "$HERE/config_test.c" "$SHIM/config.c" \
	"$SHIM/format.c"
build $CC -O2 -g -Wall -Wextra -Werror -o "$T/format_test" "$HERE/format_test.c" "$SHIM/format.c"
build $CC -O2 -g -pthread -Wall -Wextra -Werror -o "$T/ptrtab_test" "$HERE/ptrtab_test.c" "$SHIM/ptrtab.c"
build $CC -O0 -g -fno-omit-frame-pointer -rdynamic -pthread -Wall -Wextra -Werror \
	-o "$T/md_test" "$HERE/md_test.c"
build $CXX -O1 -g -std=c++17 -Wall -Wextra -Werror -o "$T/cxx_test" "$HERE/cxx_test.cc"

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
	timeout 120 env LIBC_DEBUG_MALLOC_OPTIONS="$opts" LD_PRELOAD="$T/libmdshim.so" "$@" \
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
run verify_pointers "verify_pointers" 0 "$P" verify_pointers <<EOF
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

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
