# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#
# The cases of the unwinder (unwind.c, cfi.c): rules at known pcs; walks
# against libgcc's; and backtraces through code built by
# gcc and clang, -O0 and -O2, with and without frame pointers and unwind
# tables, a signal frame, a dlopen'ed library, C++'s operator new and
# Debian's python3, each walked twice: by md_backtrace (libmdshim.so with
# front_guard: the report of a corrupted block's free) and by the batched
# sites (the shim with the probes' model, MDSHIM_BATCH: the frames of the
# block's allocation). Each asserts the exact chain of functions, main's
# callers in libc and _start included, and that the walk reached the
# stack's end.
# Sourced by run.sh, whose helpers and variables it uses.

# The shim with the probes' model in place of the sites, as batch_hooks_test has it.
build $CC -shared -fPIC -Wl,-z,now -O2 -g -fexceptions -fno-omit-frame-pointer -fno-optimize-sibling-calls -pthread \
	-Wall -Wextra -Werror -o "$T/libmdshim_model.so" "$HERE/site_model.c" $(ls "$SHIM"/*.c | grep -v '/site\.c$') -lm
build $CC -O2 -g -Wall -Wextra -Werror -c -o "$T/unwind_report.o" "$HERE/unwind_report.c"

# prog_case NAME PROGRAM: PROGRAM checks itself, its exit status says.
prog_case() {
	if "$2" >"$T/prog_case.out" 2>&1; then
		pass "$1"
	else
		cat "$T/prog_case.out"
		fail "$1"
	fi
}

# The rules at pcs whose frames are known: a PLT entry, the sigreturn
# trampoline, _start, a frame-pointer prologue, a heap address. Then the
# unwinder against libgcc's (backtrace()) over random call trees, in two
# threads and a signal handler: each walk meets the last one's memo.
for cc in gcc clang; do
	command -v "$cc" >/dev/null 2>&1 || continue
	build "$cc" -O2 -g -no-pie -fno-pie -Wall -Wextra -Werror -o "$T/cfi_test_$cc" "$HERE/cfi_test.c" "$SHIM/cfi.c"
	prog_case "cfi [$cc]" "$T/cfi_test_$cc"
	build "$cc" -O2 -g -fomit-frame-pointer -pthread -Wall -Wextra -Werror -o "$T/unwind_memo_test_$cc" \
		"$HERE/unwind_memo_test.c" "$SHIM/unwind.c" "$SHIM/cfi.c"
	prog_case "unwind_memo [$cc]" "$T/unwind_memo_test_$cc"
done

# chain_of FILE [PREFIX]: the frames of the backtrace logged in FILE, a word
# each: the function, for code in the test's directory or under PREFIX;
# else the file's name, without its version (libc.so).
chain_of() {
	sed -nE 's/^.* malloc_debug: +#[0-9]{2,3}  pc [0-9a-f]{16}  //p' "$1" |
		awk -v own="$T/" -v also="${2:-//}" '{
			path = $1; name = ""
			if (match($0, /\(.+\+[0-9]+\)$/)) {
				name = substr($0, RSTART + 1, RLENGTH - 2)
				sub(/\+[0-9]+$/, "", name)
			}
			if (name != "" && (index(path, own) == 1 || index(path, also) == 1)) {
				w = name
			} else {
				n = split(path, parts, "/")
				w = parts[n]
				sub(/\.so\..*$/, ".so", w)
			}
			printf "%s%s", sep, w
			sep = " "
		} END { print "" }'
}

# unwind_case NAME SHIM WANT PROGRAM [ARGS...]: runs PROGRAM under SHIM
# (guard or batch, with UNWIND_DEPTH frames, 64 unless set) and compares
# the chain of its backtrace with WANT, and its stop line with one stop,
# for UNWIND_STOP or at the end of the stack.
unwind_case() {
	name=$1 shim=$2 want=$3 want_stops="stops ${UNWIND_STOP:-end}=1"
	shift 3
	case $shim in
	guard) set -- env LIBC_DEBUG_MALLOC_OPTIONS=front_guard LD_PRELOAD="$T/libmdshim.so" "$@" ;;
	batch) set -- env LIBC_DEBUG_MALLOC_OPTIONS=backtrace MDSHIM_BATCH=${UNWIND_DEPTH:-64} MDSHIM_CTL=/nonexistent \
		LD_PRELOAD="$T/libmdshim_model.so" "$@" ;;
	esac
	timeout 60 "$@" >"$T/$name.out" 2>"$T/$name.err"
	status=$?
	got=$(chain_of "$T/$name.err" "${UNWIND_NAMED:-}")
	stops=$(grep '^stops' "$T/$name.out")
	if [ "$status" = 0 ] && [ "$got" = "$want" ] && [ "$stops" = "$want_stops" ]; then
		pass "$name"
	else
		echo "  exit status $status"
		echo "  chain: $got"
		echo "  want:  $want"
		echo "  $stops, want $want_stops"
		fail "$name"
	fi
}

CHAIN="c1 c2 c3 c4 c5 c6 c7 c8 c9 c10 c11 main libc.so libc.so _start"
# name, compiler, flags: the ways the chain (unwind_chain.c) and the library are built.
while read -r variant cc flags; do
	[ -n "$variant" ] || continue
	if ! command -v "$cc" >/dev/null 2>&1; then
		echo "SKIP unwind [$variant]: no $cc"
		continue
	fi
	build "$cc" $flags -g -Wall -Wextra -Werror -c -o "$T/unwind_chain_$variant.o" "$HERE/unwind_chain.c"
	build "$cc" $flags -g -Wall -Wextra -Werror -shared -fPIC -o "$T/libunwind_$variant.so" "$HERE/unwind_lib.c"
	build $CC -O2 -g -Wall -Wextra -Werror -o "$T/unwind_$variant" "$HERE/unwind_test.c" \
		"$T/unwind_chain_$variant.o" "$T/unwind_report.o" -ldl
	for shim in guard batch; do
		unwind_case "unwind chain [$variant $shim]" $shim "leaf $CHAIN" "$T/unwind_$variant" chain
		unwind_case "unwind signal [$variant $shim]" $shim "leaf on_signal libc.so spin $CHAIN" \
			"$T/unwind_$variant" signal
		if [ $shim = guard ]; then
			unwind_case "unwind altstack [$variant $shim]" $shim "leaf on_signal libc.so spin $CHAIN" \
				"$T/unwind_$variant" altstack
		fi
		unwind_case "unwind dlopen [$variant $shim]" $shim "lib_leaf lib_entry $CHAIN" \
			"$T/unwind_$variant" dlopen "$T/libunwind_$variant.so"
	done
	[ "$variant" = gcc_O2 ] || continue
	# Walks that stop early, each for its reason, after the frames they could take.
	for shim in guard batch; do
		UNWIND_STOP=no_fde unwind_case "unwind no_fde [$shim]" $shim "leaf no_fde" "$T/unwind_$variant" no_fde
		UNWIND_STOP=bad_ra unwind_case "unwind bad_ra [$shim]" $shim "leaf bad_ra" "$T/unwind_$variant" bad_ra
		UNWIND_STOP=unsupported unwind_case "unwind unsupported [$shim]" $shim "leaf unsupported" \
			"$T/unwind_$variant" unsupported
		UNWIND_STOP=stack_bounds unwind_case "unwind bounds [$shim]" $shim "leaf bounds" "$T/unwind_$variant" bounds
	done
	UNWIND_STOP=frame_limit UNWIND_DEPTH=5 unwind_case "unwind frame_limit [batch]" batch "leaf c1 c2 c3 c4" \
		"$T/unwind_$variant" chain
done <<VARIANTS
gcc_O0 gcc -O0
gcc_O2 gcc -O2 -fomit-frame-pointer
gcc_O2_fp gcc -O2 -fno-omit-frame-pointer
gcc_O2_async gcc -O2 -fomit-frame-pointer -fasynchronous-unwind-tables
gcc_O2_fp_no_tables gcc -O2 -fno-omit-frame-pointer -fno-asynchronous-unwind-tables
clang_O0 clang -O0
clang_O2 clang -O2 -fomit-frame-pointer
clang_O2_fp clang -O2 -fno-omit-frame-pointer
clang_O2_async clang -O2 -fomit-frame-pointer -fasynchronous-unwind-tables
VARIANTS

# A library dlclose'd after its frames were walked, and another mapped
# where it was whose lib_entry returns from its call at the same offset
# under another rule (unwind_reload.S): the shim's cache of rules and its
# memo must not walk the second by the first's rules.
for v in rbp sp; do
	def=
	[ $v = rbp ] && def=-DWITH_RBP
	build $CC -O2 -g -shared -fPIC -DNO_ENTRY $def -Wall -Wextra -Werror -o "$T/libunwind_reload_$v.so" \
		"$HERE/unwind_lib.c" "$HERE/unwind_reload.S"
done
for shim in guard batch; do
	unwind_case "unwind reload [$shim]" $shim "lib_leaf lib_entry $CHAIN" \
		"$T/unwind_gcc_O2" reload "$T/libunwind_reload_rbp.so" "$T/libunwind_reload_sp.so"
done

# C++: new through the shim's operator new (its frame first when batched:
# md_backtrace skips the shim's frames) and through libstdc++'s, which
# keeps no frame pointer.
for cxx in g++ clang++; do
	command -v "$cxx" >/dev/null 2>&1 || continue
	build "$cxx" -O2 -fomit-frame-pointer -g -Wall -Wextra -Werror -o "$T/unwind_cxx_$cxx" "$HERE/unwind_cxx.cc" \
		"$T/unwind_report.o" -ldl
	cxx_chain="_Z2c1i _Z2c2i _Z2c3i main libc.so libc.so _start"
	unwind_case "unwind new [$cxx guard]" guard "_Z8leaf_newi $cxx_chain" "$T/unwind_cxx_$cxx" new
	unwind_case "unwind new [$cxx batch]" batch "_Znwm _Z8leaf_newi $cxx_chain" "$T/unwind_cxx_$cxx" new
	unwind_case "unwind stdnew [$cxx guard]" guard "_Z11leaf_stdnewi $cxx_chain" "$T/unwind_cxx_$cxx" stdnew
	unwind_case "unwind stdnew [$cxx batch]" batch "libstdc++.so _Z11leaf_stdnewi $cxx_chain" \
		"$T/unwind_cxx_$cxx" stdnew
done

# Debian's python3 (no frame pointers, no .symtab): a block from ctypes,
# its guard corrupted, freed two Python functions down; the walk goes
# through libffi, _ctypes and the interpreter to Py_BytesMain and _start.
if [ -x /usr/bin/python3.11 ]; then
	cat >"$T/unwind.py" <<'PY'
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
NAMES = ["end", "frame_limit", "no_fde", "bad_ra", "unsupported", "stack_bounds"]
before, after = (ctypes.c_uint64 * 6)(), (ctypes.c_uint64 * 6)()

def inner():
    p = libc.malloc(100)
    ctypes.memset(p - 1, 0, 1)
    libc.md_unwind_stops(before)
    libc.free(p)
    libc.md_unwind_stops(after)

def outer():
    inner()

outer()
print("stops" + "".join(" %s=%d" % (n, a - b) for n, a, b in zip(NAMES, after, before) if a != b))
PY
	UNWIND_NAMED=/usr/bin/python3.11 unwind_case "unwind python3" guard "libffi.so libffi.so libffi.so \
_ctypes.cpython-311-x86_64-linux-gnu.so _ctypes.cpython-311-x86_64-linux-gnu.so _PyObject_MakeTpCall \
_PyEval_EvalFrameDefault PyEval_EvalCode python3.11 python3.11 python3.11 _PyRun_SimpleFileObject \
_PyRun_AnyFileObject Py_RunMain Py_BytesMain libc.so libc.so _start" /usr/bin/python3.11 "$T/unwind.py"
else
	echo "SKIP unwind python3: no /usr/bin/python3.11"
fi
