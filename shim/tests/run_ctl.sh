# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#
# The cases of the control channel (ctl.c): get_malloc_leak_info and the
# signals.
# Sourced by run.sh, whose helpers and variables it uses.

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

# Without mdtrace: all zero, no line but the NULL argument's (and that
# backtrace and leak_track do not apply).
run leak_info_no_mdtrace "backtrace" 0 "$T/leakinfo" <<EOF
E PROG: malloc debug: backtrace not applied: the preloaded library alone does not track allocations (run the program under mdtrace)
$LI_NULL
EOF
li_stdout leak_info_no_mdtrace
run "leak_info_no_mdtrace [guard backtrace_enable_on_signal]" "guard backtrace_enable_on_signal" 0 "$T/leakinfo" <<EOF
E PROG: malloc debug: backtrace not applied: the preloaded library alone does not track allocations (run the program under mdtrace)
$LI_NULL
EOF
li_stdout "leak_info_no_mdtrace [guard backtrace_enable_on_signal]"
run leak_info_no_backtrace "guard leak_track" 0 "$T/leakinfo" <<EOF
E PROG: malloc debug: leak_track not applied: the preloaded library alone does not track allocations (run the program under mdtrace)
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
E PROG: malloc debug: backtrace record_allocs check_unreachable_on_signal not applied: the preloaded library alone does not track allocations (run the program under mdtrace)
I PROG: malloc debug enabled
ran
EOF
ctl_run signals_verbose_backtrace "bt=8 verbose fill" "" "$P" ctl_pid <<EOF
I PROG: Run: 'kill -47 PID' to dump the backtrace.
E PROG: malloc debug: backtrace not applied: the preloaded library alone does not track allocations (run the program under mdtrace)
I PROG: malloc debug enabled
ran
EOF
ctl_run signals_not_verbose "backtrace_enable_on_signal record_allocs log_allocator_stats_on_signal check_unreachable_on_signal guard" "" "$P" ctl_pid <<EOF
E PROG: malloc debug: backtrace record_allocs check_unreachable_on_signal not applied: the preloaded library alone does not track allocations (run the program under mdtrace)
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
E PROG: malloc debug: backtrace record_allocs check_unreachable_on_signal not applied: the preloaded library alone does not track allocations (run the program under mdtrace)
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
E PROG: malloc debug: backtrace not applied: the preloaded library alone does not track allocations (run the program under mdtrace)
E Signal 47 ignored: dumping the heap needs mdtrace (the backtrace option is tracked by mdtrace)
ran
EOF
ctl_check kill47 $st 0 "$P"
