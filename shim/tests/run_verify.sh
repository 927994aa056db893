# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#
# The cases of verify_pointers.
# Sourced by run.sh, whose helpers and variables it uses.

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

# Pointers no allocator gave out, and a freed block whose memory went back
# to the kernel: with a guard, verify_pointers knows them unknown before it
# reads a header, which would kill the program.
wild_expected=$(cat <<EOF
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
E +++ ALLOCATION Q UNKNOWN POINTER (realloc)
E Backtrace at time of failure:
E FRAME
$DIV
$DIV
E +++ ALLOCATION S UNKNOWN POINTER (free)
E Backtrace at time of failure:
E FRAME
$DIV
EOF
)
run verify_wild "verify_pointers" 0 "$P" verify_wild <<EOF
$wild_expected
EOF
run "verify_wild [guard]" "guard verify_pointers" 0 "$P" verify_wild <<EOF
$wild_expected
EOF
# free_track keeps the freed block, so its header is still there.
run "verify_wild [front_guard free_track]" "front_guard free_track verify_pointers" 0 "$P" verify_wild <<EOF
$(printf '%s\n' "$wild_expected" | head -n 15)
$DIV
E +++ ALLOCATION S USED AFTER FREE (free)
E Backtrace of original free:
E FRAME
E Backtrace at time of failure:
E FRAME
$DIV
EOF
frame "verify_wild [guard]" "malloc_debug:           #00  pc [0-9a-f]{16}  .*/md_test \\(test_verify_wild\\+[0-9]+\\)$"

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
