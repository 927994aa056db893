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
# The cases are in run_checks.sh, run_verify.sh, run_ctl.sh and run_unwind.sh.
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
	-DMD_STATIC_REAL -o "$T/sample_hooks_test" "$HERE/sample_hooks_test.c" "$HERE/site_model.c" \
	$(ls "$SHIM"/*.c | grep -v '/site\.c$') -lm
# The batched sites with the same model.
build $CC -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -rdynamic -pthread -Wall -Wextra -Werror \
	-DMD_STATIC_REAL -o "$T/batch_hooks_test" "$HERE/batch_hooks_test.c" "$HERE/site_model.c" \
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

# The cases, by what they test.
. "$HERE/run_checks.sh"
. "$HERE/run_verify.sh"
. "$HERE/run_ctl.sh"
. "$HERE/run_unwind.sh"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
