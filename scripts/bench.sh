#!/usr/bin/env bash
# Side-by-side cost of malloc debug, as ratios measured in one run: each
# workload natively, under empty probes (the floors), under mdtrace with
# several options, under the shim alone and under heaptrack and valgrind
# for reference. For each workload the configurations run ROUNDS times,
# interleaved, and the median counts; the valgrind rows, the slowest, run
# SLOW_ROUNDS times.
#
# The floors of mdtrace with its shim are empty probes on its sites, with
# and without batching ("site floor", "batch floor"). There are two floors
# for mdtrace without its shim: empty probes on the first instructions of
# malloc and free ("x floor"), and the same where
# mdtrace probes ("x pfloor"): free past its null test, where the kernel
# emulates the instruction instead of single-stepping it. The first pays
# for the single step (about 85% of a pair here) and mdtrace does not; the
# second is the probes' own cost, which the BPF programs add to.
#
# Workloads:
#   pairs     testdata/pairs N: malloc/free pairs of 32 to 96 bytes (ns/pair)
#   pairs_mt  testdata/pairs_mt N THREADS: the same in THREADS threads
#             (wall-clock ns/pair)
#   sqlite3   /usr/bin/sqlite3 running scripts/bench_sqlite.sql on an
#             in-memory database, about 40000 mallocs (wall time of the
#             whole run, each tool's start and exit included; the same
#             configuration running /bin/true, timed in the same rounds,
#             shows what they cost)
#   chain     testdata/chain_gcc_o2 N: the pairs at the bottom of a call
#             chain 14 frames deep, built -O2 without frame pointers as
#             distributions build (ns/pair); chainfp: the same built with
#             them, at -O0. Its targets against heaptrack are also taken
#             as the slope between N and 10 N pairs (chain_slope)
#   procs     sh running /bin/true PROCS times, a build's pattern: each
#             child is followed, probed, reported and let go (wall ms per
#             child, the slope between PROCS and PROCS / 5 children, so
#             that the tool's own start and exit are not in it; the empty
#             probes, heaptrack and valgrind do not follow children).
#             Its target: what mdtrace adds to a child, its slope less
#             native's, at most 0.5 ms
#
# Usage: scripts/bench.sh   (as root, after make build testprogs and
# building bin/mdbench; `make bench` does all of it)
# Environment: N (20000), FAST_N (250 N: the pairs of the rows without
# probes: native and the shim alone), SLOPE_N (5 N: the shorter loop of
# the chain's slopes, the longer being 10 SLOPE_N), ROUNDS (5), SLOW_ROUNDS (3), SAMPLE_RUNS (60: runs of each sampling rate),
# AUDIT_ROUNDS (11: the rounds of the --all rows, whose runs of tens of
# milliseconds move by a quarter between rounds), BUSY_ROUNDS (3),
# BUSY_SETTLE (3), BUSY_MEASURE (4: the rounds, and the seconds before and
# of the measure, of the --all rows of a process running along; BUSY_ONLY
# set: only those), BUILD_RUNS (5), BUILD_ROUNDS (3: the cc1plus runs in a
# row under one audit, and the rounds of them; BUILD_ONLY set: only those),
# THREADS (4), PROCS (100), INJECT_ONLY (set: only the rows of -p --inject), REAL_ONLY (set: only python3's and cc1plus's rows), AUDIT_ONLY (set: only the rows of
# --all, sampling on and off), PROCS_ONLY (set: only the followed children's rows), CHAIN_ONLY (set: only the chain's slopes against heaptrack), SAMPLE_ONLY (set: only sampling's estimates), SETTLE (0.3: seconds of rest before each
# measurement; the kernel frees the maps of the run before in the
# background, the default live table's buckets taking about 75 ms of a
# CPU, which slowed the next run by up to 40%).
set -euo pipefail
cd "$(dirname "$0")/.."
# A decimal point in $EPOCHREALTIME and in awk's numbers.
export LC_ALL=C
N=${N:-20000}
ROUNDS=${ROUNDS:-5}
SLOW_ROUNDS=${SLOW_ROUNDS:-3}
AUDIT_ROUNDS=${AUDIT_ROUNDS:-11}
BUSY_ROUNDS=${BUSY_ROUNDS:-3}
THREADS=${THREADS:-4}
PROCS=${PROCS:-100}
SETTLE=${SETTLE:-0.3}
FAST_N=${FAST_N:-$((N * 250))}
SLOPE_N=${SLOPE_N:-$((N * 5))}
if ((SLOW_ROUNDS > ROUNDS)); then
	SLOW_ROUNDS=$ROUNDS
fi
shim=$PWD/bin/libmdshim.so
sql=scripts/bench_sqlite.sql
# Debian's python3's workload.
py_script='import json; d = [{"k%d" % i: [i, str(i), {"x": i * 2.5}]} for i in range(20000)]; s = json.dumps(d); assert len(json.loads(s)) == 20000'
for f in bin/mdtrace bin/mdbench "$shim" testdata/pairs testdata/pairs_mt testdata/newpairs; do
	[[ -e $f ]] || { echo "bench.sh: no $f: run make bench" >&2; exit 1; }
done
# The shim alone must really run: a shim LD_PRELOAD cannot load would
# leave the program native, and its row would look free.
if ! LD_PRELOAD=$shim grep -qF "$shim" /proc/self/maps 2>/dev/null; then
	echo "bench.sh: LD_PRELOAD=$shim does not load it" >&2
	exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mdtrace-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

order=(native floor pointfloor sitefloor batchfloor attach sites nobatch sample4k sample64k shimsites shimsample record checks shim jenative jeattach heaptrack memcheck massif)
declare -A label=(
	[native]="native"
	[floor]="floor: empty probes on malloc, free"
	[pointfloor]="  the same at mdtrace's probe points"
	[sitefloor]="site floor: empty probes on shim sites"
	[batchfloor]="  the same, the shim batching"
	[attach]="attach style: --no-preload bt=16"
	[sites]="launch, sites: backtrace=16"
	[nobatch]="  the same, --no-batch"
	[sample4k]="  the same, --sample-bytes 4096"
	[sample64k]="  the same, --sample-bytes 65536"
	[shimsites]="shim alone: sites, no probes"
	[shimsample]="  the same, sampling 4096, no probes"
	[record]="launch, sites: record_allocs"
	[checks]="launch: bt=16 guard fill free_track"
	[shim]="shim alone: guard fill"
	[jenative]="jemalloc preloaded: native"
	[jeattach]="  the same, attach style bt=16"
	[heaptrack]="heaptrack"
	[memcheck]="valgrind memcheck"
	[massif]="valgrind massif"
)
# The rows that need a tool that may be missing.
declare -A tool=([heaptrack]=heaptrack [memcheck]=valgrind [massif]=valgrind)
# The rows that need a library that may be missing.
jemalloc=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
declare -A library=([jenative]=$jemalloc [jeattach]=$jemalloc)
# The rows that trace the first process only: the empty probes, heaptrack
# (its preload library leaves the children alone) and valgrind as run here
# (with --trace-children=yes it takes 280 ms a child on these machines).
declare -A nochildren=([floor]=1 [pointfloor]=1 [sitefloor]=1 [batchfloor]=1 [heaptrack]=1 [memcheck]=1 [massif]=1)
# The rows that run SLOW_ROUNDS times.
declare -A slow=([memcheck]=1 [massif]=1)

# run_config CONFIG COMMAND [ARGS]: runs the command under a configuration,
# its output files removed afterwards; the command's status.
run_config() {
	local cfg=$1 rc=0
	shift
	case $cfg in
	native) "$@" ;;
	floor) bin/mdbench -- "$@" ;;
	pointfloor) bin/mdbench --probe-points -- "$@" ;;
	sitefloor) bin/mdbench --sites "$shim" -- "$@" ;;
	batchfloor) bin/mdbench --sites "$shim" --batch -- "$@" ;;
	attach) bin/mdtrace --no-preload -o backtrace=16 --log /dev/null -- "$@" ;;
	sites) bin/mdtrace -o backtrace=16 --log /dev/null -- "$@" ;;
	nobatch) bin/mdtrace --no-batch -o backtrace=16 --log /dev/null -- "$@" ;;
	sample4k) bin/mdtrace --sample-bytes 4096 -o backtrace=16 --log /dev/null -- "$@" 2>/dev/null ;;
	sample64k) bin/mdtrace --sample-bytes 65536 -o backtrace=16 --log /dev/null -- "$@" 2>/dev/null ;;
	record)
		bin/mdtrace -o "record_allocs record_allocs_on_exit record_allocs_file=$tmp/records" --log /dev/null -- "$@" || rc=$?
		rm -f "$tmp"/records.*
		return $rc
		;;
	checks) bin/mdtrace -o "backtrace=16 guard fill free_track" --log /dev/null -- "$@" ;;
	shim) LD_PRELOAD=$shim LIBC_DEBUG_MALLOC_OPTIONS="guard fill" "$@" ;;
	# Another allocator: jemalloc's malloc and free start with a compare
	# and register moves, and mdtrace probes their first branches.
	jenative) LD_PRELOAD=$jemalloc "$@" ;;
	jeattach) LD_PRELOAD=$jemalloc bin/mdtrace --no-preload -o backtrace=16 --log /dev/null -- "$@" ;;
	# The sampler's own cost, its decision and its set of sampled blocks:
	# the shim's hooks calling unprobed sites, without and with sampling.
	shimsites) LD_PRELOAD=$shim "$@" ;;
	shimsample) LD_PRELOAD=$shim MDSHIM_SAMPLE_BYTES=4096 "$@" ;;
	heaptrack)
		heaptrack -o "$tmp/heaptrack" "$@" || rc=$?
		rm -f "$tmp"/heaptrack.*
		return $rc
		;;
	# mdtrace attached to the running program (-p), with and without
	# --inject, before its loop: see attached.
	pattach) attached "" "$@" ;;
	inject) attached --inject "$@" ;;
	memcheck) valgrind --tool=memcheck -q "$@" ;;
	massif)
		valgrind --tool=massif -q --massif-out-file="$tmp/massif.out" "$@" || rc=$?
		rm -f "$tmp/massif.out"
		return $rc
		;;
	esac
}

# The chain's cost per pair as the slope between two loop lengths, N and
# 10 N pairs (N = SLOPE_N), so that what a tool's start-up and its first calls cost does
# not count (heaptrack resolves symbols in the background as the loop runs).
# Two measures, medians of ROUNDS runs at each length:
#  - in the loop: each run's own timing of its loop, times its pairs: what
#    the program waits for;
#  - CPU: user and system time of the tool and every process it waits for
#    (mdtrace: its probes run in the traced program's time; heaptrack: its
#    interpreter process works beside the program on the other CPU): what
#    the machine pays. The target against heaptrack is on this one.
# And two patterns: each block freed at once (LAG 0; the shim takes a pair
# whose malloc is still in its thread's batch back, and no probe sees it),
# and each freed 256 pairs after its malloc (LAG 256: every call reaches
# the probes, each allocation with its 16 frames).
# chain_slope CONFIG LAG prints "INLOOP CPU LOOPCPU" in ns a pair, the last
# being the CPU the process spent in its loop (its own clock, the probes'
# time included), which no tool's start or end can blur.
chain_slope() {
	local cfg=$1 lag=$2 n r loop1 loop2 cpu1 cpu2 lcpu1 lcpu2
	local TIMEFORMAT='%3U %3S'
	for n in "$SLOPE_N" "$((SLOPE_N * 10))"; do
		local loops="" cpus="" lcpus="" out t
		for ((r = 0; r < ROUNDS; r++)); do
			sleep "$SETTLE"
			out=$({ time run_config "$cfg" testdata/chain_gcc_o2 "$n" "$lag" </dev/null >"$tmp/slope.out" 2>/dev/null; } 2>&1) || true
			t=$(awk -v n="$n" '/^pairs / {print $3 * n; exit}' "$tmp/slope.out")
			[[ -n $t ]] || continue
			loops+="$t "
			lcpus+="$(awk -v n="$n" '/^pairs / {print $4 * n; exit}' "$tmp/slope.out") "
			cpus+="$(awk '{printf "%.0f", ($1 + $2) * 1e9}' <<<"$out") "
		done
		if [[ $n == "$SLOPE_N" ]]; then
			loop1=$(median <<<"$loops") cpu1=$(median <<<"$cpus") lcpu1=$(median <<<"$lcpus")
		else
			loop2=$(median <<<"$loops") cpu2=$(median <<<"$cpus") lcpu2=$(median <<<"$lcpus")
		fi
	done
	[[ -n $loop1 && -n $loop2 && -n $cpu1 && -n $cpu2 ]] &&
		awk -v a="$loop1" -v b="$loop2" -v c="$cpu1" -v d="$cpu2" -v e="$lcpu1" -v f="$lcpu2" -v n="$SLOPE_N" \
			'BEGIN {printf "%.1f %.1f %.1f", (b - a) / (9 * n), (d - c) / (9 * n), (f - e) / (9 * n)}'
}
# inject_row LAG TEXT: the chain's slopes attached with -p --inject, and
# with -p alone, against launch mode's: --inject's target is launch mode's
# cost, twice at most, in the CPU the process spends in its loop (the
# probes' time included). The CPU of the whole tree (mdtrace's too) is for
# information: attached, mdtrace's start and end vary by more than the
# shorter loop costs.
inject_row() {
	local lag=$1 what=$2
	local s_loop s_cpu s_lcpu i_loop i_cpu i_lcpu p_loop p_cpu p_lcpu
	read -r s_loop s_cpu s_lcpu <<<"$(chain_slope sites "$lag")" || true
	read -r i_loop i_cpu i_lcpu <<<"$(chain_slope inject "$lag")" || true
	read -r p_loop p_cpu p_lcpu <<<"$(chain_slope pattach "$lag")" || true
	printf '  %-9s %-44s %8s  (for information)\n' chain "$what: launch, ns a pair: loop, its CPU, tree CPU" "${s_loop:-n/a}, ${s_lcpu:-n/a}, ${s_cpu:-n/a}"
	printf '  %-9s %-44s %8s  (for information)\n' chain "$what: -p --inject, the same" "${i_loop:-n/a}, ${i_lcpu:-n/a}, ${i_cpu:-n/a}"
	printf '  %-9s %-44s %8s  (for information)\n' chain "$what: -p, the same" "${p_loop:-n/a}, ${p_lcpu:-n/a}, ${p_cpu:-n/a}"
	printf '  %-9s %-44s %8s  (for information)\n' chain "$what: --inject / launch mode, in the loop" "$(ratio "${i_loop:-}" "${s_loop:-}")x"
	printf '  %-9s %-44s %8s  %-2s %-5s %s\n' chain "$what: --inject / launch mode, CPU in the loop" "$(ratio "${i_lcpu:-}" "${s_lcpu:-}")x" "<=" 2 \
		"$(awk -v i="${i_lcpu:-}" -v s="${s_lcpu:-}" 'BEGIN {print (i != "" && s > 0 && i / s <= 2) ? "PASS" : "MISS"}')"
	printf '  %-9s %-44s %8s  (for information)\n' chain "$what: -p / -p --inject, CPU in the loop" "$(ratio "${p_lcpu:-}" "${i_lcpu:-}")x"
}

# attached [--inject] testdata/chain_gcc_o2 ARGS: runs the chain with
# CHAIN_WAIT set, attaches mdtrace -p (and --inject) to it while it waits,
# lets it run its loop once mdtrace is ready, and interrupts mdtrace once
# it has exited. Both are this shell's children: a `time` around it
# counts the CPU of both.
attached() {
	local inject=$1 pid m rc=0
	shift
	rm -f "$tmp/go" "$tmp/pready" "$tmp/chain.out"
	mkfifo "$tmp/go"
	CHAIN_WAIT=1 "$@" <"$tmp/go" >"$tmp/chain.out" &
	pid=$!
	exec {go}>"$tmp/go"
	while ! grep -q '^ready' "$tmp/chain.out" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 0.005; done
	bin/mdtrace -p "$pid" $inject -o backtrace=16 --log /dev/null --ready-file "$tmp/pready" 2>"$tmp/attached.err" &
	m=$!
	while [[ ! -e $tmp/pready ]] && kill -0 "$m" 2>/dev/null; do sleep 0.005; done
	echo >&"$go"
	exec {go}>&-
	wait "$pid" || rc=$?
	kill -INT "$m" 2>/dev/null || true
	wait "$m" || rc=$?
	grep -v '^ready' "$tmp/chain.out"
	[[ -e $tmp/pready ]] || rc=1
	return $rc
}

# sample WORKLOAD CONFIG: one measurement, ns/pair or ms, or "fail" (the
# reason in $tmp/err.CONFIG).
sample() {
	local wl=$1 cfg=$2 out t0 t1
	sleep "$SETTLE"
	case $wl in
	pairs | pairs_mt | newpairs | chain | chainfp)
		# The rows without probes take a few milliseconds at N pairs:
		# they make FAST_N, for a run long enough to time.
		local n=$N
		if [[ -n ${fast[$cfg]:-} ]]; then
			n=$FAST_N
		fi
		local args=(testdata/"$wl" "$n")
		case $wl in
		chain) args=(testdata/chain_gcc_o2 "$n") ;;
		chainfp) args=(testdata/chain_o0 "$n") ;;
		esac
		if [[ $wl == pairs_mt ]]; then
			args+=("$THREADS")
		fi
		if out=$(run_config "$cfg" "${args[@]}" </dev/null 2>"$tmp/err.$cfg"); then
			out=$(awk '/^pairs / {print $3; exit}' <<<"$out")
			echo "${out:-fail}"
		else
			echo fail
		fi
		;;
	procs)
		# The slope between PROCS and PROCS / 5 children: each run's
		# start and exit cancel out.
		local short=$((PROCS / 5)) tl ts
		t0=$EPOCHREALTIME
		if run_config "$cfg" sh -c 'i=0; while [ $i -lt "$0" ]; do /bin/true; i=$((i + 1)); done' "$PROCS" </dev/null >/dev/null 2>"$tmp/err.$cfg"; then
			t1=$EPOCHREALTIME
			tl=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f", b - a}')
			sleep "$SETTLE"
			t0=$EPOCHREALTIME
			if run_config "$cfg" sh -c 'i=0; while [ $i -lt "$0" ]; do /bin/true; i=$((i + 1)); done' "$short" </dev/null >/dev/null 2>"$tmp/err.$cfg"; then
				t1=$EPOCHREALTIME
				ts=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f", b - a}')
				awk -v l="$tl" -v s="$ts" -v n="$((PROCS - short))" 'BEGIN {printf "%.3f\n", (l - s) * 1000 / n}'
			else
				echo fail
			fi
		else
			echo fail
		fi
		;;
	python3 | cc1plus)
		# Whole runs of Debian's own programs, wall clock: python3 on
		# $py_script; gcc's C++ compiler proper on a preprocessed
		# translation unit of the standard library's containers.
		local args=(/usr/bin/python3 -c "$py_script")
		if [[ $wl == cc1plus ]]; then
			args=("$cc1plus" -quiet -fpreprocessed -O1 "$tmp/unit.ii" -o /dev/null)
		fi
		t0=$EPOCHREALTIME
		if run_config "$cfg" "${args[@]}" </dev/null >"$tmp/out.$cfg" 2>"$tmp/err.$cfg"; then
			t1=$EPOCHREALTIME
			awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", (b - a) * 1000}'
		else
			echo fail
		fi
		;;
	sqlite3 | true)
		# sqlite3's timer gives each statement's CPU time (user and
		# system, which holds the probes'): their sum, in
		# $tmp/cpu.CONFIG, is the program's work without its start and
		# exit, or mdtrace's.
		local args=(sqlite3 -batch -init /dev/null -cmd ".timer on" :memory:) input=$sql
		if [[ $wl == true ]]; then
			args=(/bin/true) input=/dev/null
		fi
		t0=$EPOCHREALTIME
		if run_config "$cfg" "${args[@]}" <"$input" >"$tmp/out.$cfg" 2>"$tmp/err.$cfg"; then
			t1=$EPOCHREALTIME
			awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", (b - a) * 1000}'
			awk '/^Run Time:/ {t += $6 + $8} END {printf "%.2f\n", t * 1000}' "$tmp/out.$cfg" >"$tmp/cpu.$cfg"
		else
			echo fail
		fi
		;;
	esac
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}'; }
# spread: (max - min) / median, in percent.
spread() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {if (NR) printf "%.0f%%", 100 * (a[NR] - a[1]) / a[int((NR + 1) / 2)]}'; }
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		if (a == "" || b == "" || b <= 0) exit
		r = a / b
		f = r >= 100 ? "%.0f\n" : r >= 10 ? "%.1f\n" : r >= 0.01 ? "%.2f\n" : "%.4f\n"
		printf f, r }'
}

# The configurations without probes, timed over FAST_N pairs.
declare -A fast=([native]=1 [shimsites]=1 [shimsample]=1 [shim]=1 [jenative]=1)
declare -A med  # WORKLOAD/CONFIG: median
declare -A runs # WORKLOAD/CONFIG: the measurements, in round order
declare -A why # WORKLOAD/CONFIG: why there is none
declare -A unit=([pairs]="ns/pair" [pairs_mt]="ns/pair" [newpairs]="ns/pair" [chain]="ns/pair" [chainfp]="ns/pair" [sqlite3]="ms" [procs]="ms/child" [python3]="ms" [cc1plus]="ms")
declare -A title=(
	[chain]="testdata/chain_gcc_o2 $N: pairs 14 frames deep, -O2 without frame pointers (native: $FAST_N)"
	[chainfp]="testdata/chain_o0 $N: the same chain with frame pointers, -O0 (native: $FAST_N)"
	[pairs]="testdata/pairs $N: malloc/free pairs (rows without probes: $FAST_N)"
	[pairs_mt]="testdata/pairs_mt $N $THREADS: pairs in $THREADS threads, wall clock (rows without probes: $FAST_N)"
	[sqlite3]="sqlite3 < $sql: whole run (wall clock)"
	[python3]="Debian's python3 building, serializing and parsing 20000 dicts: whole run (wall clock)"
	[cc1plus]="gcc's cc1plus -O1 on a preprocessed unit of <map>, <string>, <vector>, <iostream>: whole run (wall clock)"
	[procs]="sh running /bin/true: wall clock per child, the slope between $PROCS and $((PROCS / 5)) children"
	[newpairs]="testdata/newpairs $N: C++ new/delete and new[]/delete[] pairs (rows without probes: $FAST_N)"
)
# The configurations a workload runs, where not all of them: C++'s new and
# delete under glibc's libstdc++ (new calls malloc; without the shim its
# operator new has a probe of its own for backtraces) and under jemalloc
# (its own operators, probed as allocation functions).
declare -A only=([python3]="native attach sites nobatch sample64k heaptrack memcheck" [cc1plus]="native attach sites nobatch sample64k heaptrack memcheck" [newpairs]="native attach sites nobatch jenative jeattach" [chain]="native attach sites nobatch heaptrack" [chainfp]="native attach sites nobatch heaptrack")

# bench WORKLOAD: measures every configuration and prints the table.
bench() {
	local wl=$1 r cfg s
	local -a order=("${order[@]}")
	if [[ -n ${only[$wl]:-} ]]; then
		read -r -a order <<<"${only[$wl]}"
	fi
	declare -A samples=()
	for cfg in "${order[@]}"; do
		if [[ -n ${tool[$cfg]:-} ]] && ! command -v "${tool[$cfg]}" >/dev/null 2>&1; then
			why[$wl/$cfg]="${tool[$cfg]} not installed"
		fi
		if [[ -n ${library[$cfg]:-} && ! -e ${library[$cfg]} ]]; then
			why[$wl/$cfg]="${library[$cfg]##*/} not installed"
		fi
		if [[ $wl == procs && -n ${nochildren[$cfg]:-} ]]; then
			why[$wl/$cfg]="does not follow children"
		fi
	done
	for ((r = 0; r < ROUNDS; r++)); do
		for cfg in "${order[@]}"; do
			if [[ -n ${why[$wl/$cfg]:-} ]] || { [[ -n ${slow[$cfg]:-} ]] && ((r >= SLOW_ROUNDS)); }; then
				continue
			fi
			s=$(sample "$wl" "$cfg")
			if [[ $s == fail ]]; then
				why[$wl/$cfg]="failed: $(grep -v '^mdtrace: tracing' "$tmp/err.$cfg" | head -1 | cut -c1-60)"
				continue
			fi
			samples[$cfg]+="$s "
			if [[ $wl == sqlite3 ]]; then
				samples[$cfg/cpu]+="$(cat "$tmp/cpu.$cfg") "
				# The tool's own start and exit, on a program that does
				# next to nothing.
				s=$(sample true "$cfg")
				if [[ $s != fail ]]; then
					samples[$cfg/true]+="$s "
				fi
			fi
		done
	done
	for cfg in "${order[@]}"; do
		if [[ -z ${why[$wl/$cfg]:-} ]]; then
			med[$wl/$cfg]=$(median <<<"${samples[$cfg]}")
			runs[$wl/$cfg]=${samples[$cfg]}
			if [[ $wl == sqlite3 ]]; then
				med[true/$cfg]=$(median <<<"${samples[$cfg/true]:-}")
				runs[true/$cfg]=${samples[$cfg/true]:-}
				med[cpu/$cfg]=$(median <<<"${samples[$cfg/cpu]:-}")
				runs[cpu/$cfg]=${samples[$cfg/cpu]:-}
			fi
		fi
	done
	local native=${med[$wl/native]:-} floor=${med[$wl/floor]:-} pointfloor=${med[$wl/pointfloor]:-} sitefloor=${med[$wl/sitefloor]:-}
	echo
	echo "${title[$wl]}, median of $ROUNDS rounds (* of $SLOW_ROUNDS)"
	local fmt='%-40s %10s %9s %8s %9s %11s %7s%s\n' extra=""
	if [[ $wl == sqlite3 ]]; then
		extra=" on true  stmt cpu"
	fi
	printf "$fmt" "" "${unit[$wl]}" "x native" "x floor" "x pfloor" "x sitefloor" "spread" "$extra"
	local name m
	for cfg in "${order[@]}"; do
		name=${label[$cfg]}
		if [[ -n ${slow[$cfg]:-} ]]; then
			name+=" *"
		fi
		if [[ -n ${why[$wl/$cfg]:-} ]]; then
			printf '%-40s %s\n' "$name" "${why[$wl/$cfg]}"
			continue
		fi
		m=${med[$wl/$cfg]}
		extra=""
		if [[ $wl == sqlite3 ]]; then
			extra=$(printf ' %8s %9s' "${med[true/$cfg]:-?}" "${med[cpu/$cfg]:-?}")
		fi
		printf "${fmt/10s/10.1f}" "$name" "$m" "$(ratio "$m" "$native")" \
			"$(ratio "$m" "$floor")" "$(ratio "$m" "$pointfloor")" "$(ratio "$m" "$sitefloor")" "$(spread <<<"${samples[$cfg]}")" "$extra"
	done
}

# paired A B [TA TB]: the median over the rounds of A's measurement over
# B's in the same round (with TA and TB, each less its time on /bin/true in
# that round): the two ran side by side, so what slows a whole round
# cancels out.
paired() {
	local r
	r=$(awk -v a="$1" -v b="$2" -v ta="${3:-}" -v tb="${4:-}" 'BEGIN {
		na = split(a, A, " "); nb = split(b, B, " ")
		nt = split(ta, TA, " "); split(tb, TB, " ")
		n = na < nb ? na : nb
		if (ta != "" && nt < n) n = nt
		for (i = 1; i <= n; i++) {
			x = A[i]; y = B[i]
			if (ta != "") { x -= TA[i]; y -= TB[i] }
			if (y > 0) print x / y
		}
	}' | median)
	if [[ -n $r ]]; then
		printf '%.2f' "$r"
	fi
}

# target WORKLOAD TEXT A B OP LIMIT: prints A/B (the median of the rounds'
# ratios) against the target "A/B OP LIMIT" with PASS or MISS. For sqlite3
# it adds, for information, the ratio with each side's time on /bin/true
# taken off.
target() {
	local wl=$1 text=$2 a=${runs[$1/$3]:-} b=${runs[$1/$4]:-} op=$5 limit=$6 r verdict net=""
	if [[ -z $a || -z $b ]]; then
		r="n/a"
		verdict="(${why[$wl/$3]:-${why[$wl/$4]:-no figure}})"
	else
		r=$(paired "$a" "$b")
		verdict=$(awk -v r="$r" -v l="$limit" -v op="$op" 'BEGIN {
			ok = op == "<=" ? r <= l : op == ">=" ? r >= l : r < l
			print ok ? "PASS" : "MISS" }')
		r+=x
		if [[ $wl == sqlite3 && -n ${runs[true/$3]:-} && -n ${runs[true/$4]:-} ]]; then
			net=$(paired "$a" "$b" "${runs[true/$3]}" "${runs[true/$4]}")
			net=${net:+(${net}x without start and exit)}
		fi
		# The statements' CPU time less the native run's: what the
		# calls cost, with no start or exit at all.
		if [[ $wl == sqlite3 && -n ${runs[cpu/$3]:-} && -n ${runs[cpu/$4]:-} && -n ${runs[cpu/native]:-} && $4 != native ]]; then
			local calls
			calls=$(paired "${runs[cpu/$3]}" "${runs[cpu/$4]}" "${runs[cpu/native]}" "${runs[cpu/native]}")
			net+="${calls:+ (${calls}x on the statement CPU time over native)}"
		fi
	fi
	printf '  %-9s %-44s %8s  %-2s %-5s %s%s\n' "$wl" "$text" "$r" "$op" "$limit" "$verdict" "${net:+ $net}"
}

# audited MODE ARGS -- CMD...: the wall time (s) of CMD while `mdtrace --all
# ARGS` audits the host, started and ready before it and interrupted after;
# MODE native: alone.
audited() {
	local mode=$1 m="" t0 t1 args=()
	shift
	while [[ $1 != -- ]]; do
		args+=("$1")
		shift
	done
	shift
	if [[ $mode != native ]]; then
		rm -f "$tmp/aready"
		bin/mdtrace --all "${args[@]}" --ready-file "$tmp/aready" >/dev/null 2>&1 &
		m=$!
		while [[ ! -e $tmp/aready ]] && kill -0 "$m" 2>/dev/null; do sleep 0.01; done
	fi
	t0=$EPOCHREALTIME
	"$@" </dev/null >/dev/null 2>&1 || true
	t1=$EPOCHREALTIME
	if [[ -n $m ]]; then
		kill -INT "$m" 2>/dev/null || true
		wait "$m" 2>/dev/null || true
	fi
	awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.4f", b - a}'
}
# What --all costs the host: a workload's wall time while `mdtrace --all`
# audits every process, against its time alone, in the same rounds: with
# its default sampling (one allocation every 4096 bytes) and without
# (--sample-bytes 0), each also with --backtrace, and with --inject. The
# audit's probes have no PID filter: every process's malloc and free reach
# them, and their traps cost the same sampled or not; sampling saves the
# walks and the table's writes of the blocks it passes over. With
# --inject, a process gets the shim at the count of calls whose traps cost
# it 16 ms (the audit measures a trap's cost as it starts, and says the
# count), and samples in itself from then on.
audit_cost() {
	local name=$1 r mode
	shift
	declare -A times=()
	declare -A args=([all]="" [allexact]="--sample-bytes 0" [allbt]="--backtrace" [allbtexact]="--backtrace --sample-bytes 0" [inject]="--inject")
	for ((r = 0; r < AUDIT_ROUNDS; r++)); do
		for mode in native all allexact allbt allbtexact inject; do
			sleep "$SETTLE"
			# shellcheck disable=SC2086
			times[$mode]+="$(audited "$mode" ${args[$mode]:-} -- "$@") "
		done
	done
	local n v
	n=$(median <<<"${times[native]}")
	printf '  %-9s %-44s %8s  (median of %d, s; spread %s)\n' "$name" "alone, wall time" "$n" "$AUDIT_ROUNDS" "$(spread <<<"${times[native]}")"
	for mode in all allexact inject; do
		v=$(median <<<"${times[$mode]}")
		printf '  %-9s %-44s %8s  %-2s %-5s %s (spread %s)\n' "$name" "--all ${args[$mode]:-(sampling on)} / alone" "$(ratio "$v" "$n")x" "<=" 1.05 \
			"$(awk -v a="$v" -v n="$n" 'BEGIN {print (n > 0 && a / n <= 1.05) ? "PASS" : "MISS"}')" "$(spread <<<"${times[$mode]}")"
	done
	for mode in allbt allbtexact; do
		v=$(median <<<"${times[$mode]}")
		printf '  %-9s %-44s %8s  (for information)\n' "$name" "--all ${args[$mode]} / alone" "$(ratio "$v" "$n")x"
	done
}
audit_rows() {
	# The count at which --inject takes a process, by the trap's cost the
	# audit measures as it starts.
	local said
	said=$(bin/mdtrace --all --inject --duration 1s 2>&1 >/dev/null | sed -n 's/.*shim at its \([0-9]*\)[a-z]* call of the allocator.*a call.s hits cost a process \([0-9.]*\) µs here.*/\1 \2/p')
	if [[ -n $said ]]; then
		printf '  --inject takes a process at call %s: a call'"'"'s probe hits cost %s µs here, as the audit measured\n' "${said% *}" "${said#* }"
	fi
	if command -v sqlite3 >/dev/null 2>&1; then
		audit_cost sqlite3 sh -c "sqlite3 -batch -init /dev/null :memory: < $sql"
	fi
	if [[ -x /usr/bin/python3 ]]; then
		audit_cost python3 /usr/bin/python3 -c 'import json, email.parser, decimal; json.dumps([{"a": i} for i in range(20000)])'
	fi
	if [[ -n $cc1plus && -s $tmp/unit.ii ]]; then
		audit_cost cc1plus "$cc1plus" -quiet -fpreprocessed -O1 "$tmp/unit.ii" -o /dev/null
	fi
}
# What --all costs a build: cc1plus run BUILD_RUNS times in a row under one
# audit (started before the first), against the same runs alone, the
# medians of BUILD_ROUNDS rounds. With --inject the first run is taken at
# the count the audit measures, the later ones, runs of a program taken
# before, at their 256th.
BUILD_RUNS=${BUILD_RUNS:-5}
BUILD_ROUNDS=${BUILD_ROUNDS:-3}
build_runs() {
	local i
	for ((i = 0; i < BUILD_RUNS; i++)); do
		"$cc1plus" -quiet -fpreprocessed -O1 "$tmp/unit.ii" -o /dev/null || true
	done
}
build_rows() {
	[[ -n $cc1plus && -s $tmp/unit.ii ]] || return 0
	local r mode
	declare -A times=()
	declare -A args=([all]="" [inject]="--inject")
	for ((r = 0; r < BUILD_ROUNDS; r++)); do
		for mode in native all inject; do
			sleep "$SETTLE"
			# shellcheck disable=SC2086
			times[$mode]+="$(audited "$mode" ${args[$mode]:-} -- build_runs) "
		done
	done
	local n v
	n=$(median <<<"${times[native]}")
	printf '  %-9s %-44s %8s  (median of %d, s; spread %s)\n' build "$BUILD_RUNS cc1plus runs in a row, alone" "$n" "$BUILD_ROUNDS" "$(spread <<<"${times[native]}")"
	v=$(median <<<"${times[all]}")
	printf '  %-9s %-44s %8s  (for information; spread %s)\n' build "the same under one --all / alone" "$(ratio "$v" "$n")x" "$(spread <<<"${times[all]}")"
	v=$(median <<<"${times[inject]}")
	printf '  %-9s %-44s %8s  %-2s %-5s %s (spread %s)\n' build "the same under one --all --inject / alone" "$(ratio "$v" "$n")x" "<=" 1.05 \
		"$(awk -v a="$v" -v n="$n" 'BEGIN {print (n > 0 && a / n <= 1.05) ? "PASS" : "MISS"}')" "$(spread <<<"${times[inject]}")"
}
# What --all costs a busy process that runs all along, as a service does:
# the process starts alone and runs rounds of the same work without end,
# a line each; the audit starts (or not), and after BUSY_SETTLE seconds
# the rounds of the next BUSY_MEASURE seconds are timed, by when their
# lines come. Three modes in each round, the process started anew for
# each: alone, --all (its default sampling; every call traps), and --all
# --inject (after a scan or two the process calls through the shim, which
# samples in the process; only its samples reach the probes).
BUSY_SETTLE=${BUSY_SETTLE:-3}
BUSY_MEASURE=${BUSY_MEASURE:-4}
busy_sqlite() {
	{
		while :; do
			cat "$sql"
			echo "DROP TABLE t; DROP TABLE alpha; SELECT 'round';"
		done
	} | sqlite3 -batch -init /dev/null :memory:
}
busy_python() {
	/usr/bin/python3 -u -c "
while True:
    $py_script
    print('round')"
}
# busy_times WORKER MODE: the round times (ms) of WORKER (a function) in
# the measured window, with the audit of MODE (alone, all, inject).
busy_times() {
	local worker=$1 mode=$2 w m="" t0 now prev="" out="" line
	rm -f "$tmp/busy.fifo" "$tmp/bready"
	mkfifo "$tmp/busy.fifo"
	sql=$sql py_script=$py_script setsid bash -c "$(declare -f "$worker"); $worker" >"$tmp/busy.fifo" 2>/dev/null &
	w=$!
	exec {fd}<"$tmp/busy.fifo"
	# Its first round, before the audit.
	while read -r -u "$fd" line && [[ $line != round ]]; do :; done
	case $mode in
	all) bin/mdtrace --all --ready-file "$tmp/bready" >/dev/null 2>&1 & m=$! ;;
	inject) bin/mdtrace --all --inject --ready-file "$tmp/bready" >/dev/null 2>&1 & m=$! ;;
	esac
	if [[ -n $m ]]; then
		while [[ ! -e $tmp/bready ]] && kill -0 "$m" 2>/dev/null; do sleep 0.01; done
	fi
	# Microseconds, without a process per line.
	t0=${EPOCHREALTIME/./}
	while read -r -u "$fd" line; do
		[[ $line == round ]] || continue
		now=${EPOCHREALTIME/./}
		((now - t0 > (BUSY_SETTLE + BUSY_MEASURE) * 1000000)) && break
		if [[ -n $prev ]] && ((prev - t0 >= BUSY_SETTLE * 1000000)); then
			out+="$(((now - prev) / 1000)) "
		fi
		prev=$now
	done
	kill -- -"$w" 2>/dev/null || true
	exec {fd}<&-
	wait "$w" 2>/dev/null || true
	if [[ -n $m ]]; then
		kill -INT "$m" 2>/dev/null || true
		wait "$m" 2>/dev/null || true
	fi
	echo "$out"
}
busy_cost() {
	local name=$1 worker=$2 r mode
	declare -A times=()
	for ((r = 0; r < BUSY_ROUNDS; r++)); do
		for mode in alone all inject; do
			sleep "$SETTLE"
			times[$mode]+="$(median <<<"$(busy_times "$worker" "$mode")") "
		done
	done
	local n v
	n=$(median <<<"${times[alone]}")
	printf '  %-9s %-44s %8s  (median of %d, ms; spread %s)\n' "$name" "running along, a round alone" "$n" "$BUSY_ROUNDS" "$(spread <<<"${times[alone]}")"
	v=$(median <<<"${times[all]}")
	printf '  %-9s %-44s %8s  (for information; spread %s)\n' "$name" "running along: --all / alone" "$(ratio "$v" "$n")x" "$(spread <<<"${times[all]}")"
	v=$(median <<<"${times[inject]}")
	printf '  %-9s %-44s %8s  %-2s %-5s %s (spread %s)\n' "$name" "running along: --all --inject / alone" "$(ratio "$v" "$n")x" "<=" 1.05 \
		"$(awk -v a="$v" -v n="$n" 'BEGIN {print (n > 0 && a / n <= 1.05) ? "PASS" : "MISS"}')" "$(spread <<<"${times[inject]}")"
}
busy_rows() {
	if command -v sqlite3 >/dev/null 2>&1; then
		busy_cost sqlite3 busy_sqlite
	fi
	if [[ -x /usr/bin/python3 ]]; then
		busy_cost python3 busy_python
	fi
}
slope_row() {
	local lag=$1 what=$2 s h
	read -r s_loop s_cpu _ <<<"$(chain_slope sites "$lag")" || true
	h_loop="" h_cpu=""
	if command -v heaptrack >/dev/null 2>&1; then
		read -r h_loop h_cpu _ <<<"$(chain_slope heaptrack "$lag")" || true
	fi
	printf '  %-9s %-44s %8s  %-2s %-5s %s\n' chain "$what: with sites, ns a pair in the loop" "${s_loop:-n/a}" "<=" 500 \
		"$(awk -v r="${s_loop:-}" 'BEGIN {print r != "" && r <= 500 ? "PASS" : "MISS"}')"
	printf '  %-9s %-44s %8s  (for information)\n' chain "$what: with sites, CPU ns a pair" "${s_cpu:-n/a}"
	printf '  %-9s %-44s %8s  (for information)\n' chain "$what: heaptrack, ns a pair in the loop, CPU" "${h_loop:-n/a}, ${h_cpu:-n/a}"
	printf '  %-9s %-44s %8s  (for information)\n' chain "$what: heaptrack / with sites, in the loop" "$(ratio "${h_loop:-}" "${s_loop:-}")x"
	printf '  %-9s %-44s %8s  %-2s %-5s %s\n' chain "$what: heaptrack / with sites, CPU" "$(ratio "${h_cpu:-}" "${s_cpu:-}")x" ">=" 2 \
		"$(awk -v h="${h_cpu:-}" -v s="${s_cpu:-}" 'BEGIN {print (h != "" && s > 0 && h / s >= 2) ? "PASS" : "MISS"}')"
}
# The real programs: Debian's python3, and gcc's C++ compiler proper on a
# unit preprocessed here once.
cc1plus=$(ls /usr/lib/gcc/x86_64-linux-gnu/*/cc1plus 2>/dev/null | tail -1)
realprogs=()
if [[ -x /usr/bin/python3 ]]; then
	realprogs+=(python3)
else
	echo "python3 not installed: its workload is skipped"
fi
if [[ -n $cc1plus ]] && printf '#include <map>\n#include <string>\n#include <vector>\n#include <iostream>\nint main() { std::map<std::string, std::vector<int>> m; m["a"].push_back(1); std::cout << m.size(); }\n' |
	g++ -E -x c++ - -o "$tmp/unit.ii" 2>/dev/null; then
	realprogs+=(cc1plus)
else
	echo "g++ and its cc1plus not installed: their workload is skipped"
fi
# The real programs, side by side: each mode and tool against the native
# run, and launch mode against heaptrack, whole runs (start-up included).
real_rows() {
	local wl cfg
	for wl in "${realprogs[@]}"; do
		for cfg in attach sites nobatch sample64k heaptrack memcheck; do
			printf '  %-9s %-44s %8s  (for information)\n' "$wl" "${label[$cfg]} / native" "$(paired "${runs[$wl/$cfg]:-}" "${runs[$wl/native]:-}")x"
		done
		target "$wl" "heaptrack / with sites (sites cheaper by)" heaptrack sites ">=" 2
	done
}
# A followed child: what mdtrace adds to each (its slope less native's).
procs_row() {
	local added
	added=$(awk -v m="${med[procs/sites]:-}" -v n="${med[procs/native]:-}" 'BEGIN {if (m != "" && n != "") printf "%.2f", m - n}')
	printf '  %-9s %-44s %8s  %-2s %-5s %s\n' procs "with sites, ms a child beyond native's ${med[procs/native]:-n/a}" "${added:-n/a}" "<=" 0.5 \
		"$(awk -v a="${added:-}" 'BEGIN {print a != "" && a <= 0.5 ? "PASS" : "MISS"}')"
}
# Sampling's estimates against exact tracing of the same workload:
# testdata/sampled leaks 20000 blocks of 64 bytes, 2000 of 4096 and 2000 of
# 2048 (grown by realloc), and frees 20000 of 64 (pairs frees all it
# allocates: nothing live to estimate). Each run's exit
# heap dump gives the live blocks and bytes; the error is the estimate's
# against the exact run's.
sample_rows() {
	# The errors are signed: their mean, with its 95% confidence interval
	# (1.96 standard errors), says whether the estimate is biased; the mean of
	# their sizes says how far one run is off. SAMPLE_RUNS runs each: at 65536
	# one run's block count is off by about 19% (20 samples of the 64-byte
	# blocks), which 20 runs left a 95% interval of +-8%, too wide to tell a
	# bias of a few percent.
	SAMPLE_RUNS=${SAMPLE_RUNS:-60}
	echo "--sample-bytes estimates against exact tracing, testdata/sampled (24000 blocks, 13568000 bytes leaked), $SAMPLE_RUNS runs each:"
	dump_totals() { awk '/^z / {n += $6; b += $4 * $6} END {print n + 0, b + 0}' "$1"; }
	exact=""
	for interval in 0 4096 65536; do
		errs_n="" errs_b=""
		for ((r = 0; r < SAMPLE_RUNS; r++)); do
			rm -f "$tmp"/est.*
			flag=()
			if ((interval > 0)); then
				flag=(--sample-bytes "$interval")
			fi
			bin/mdtrace "${flag[@]}" -o "backtrace backtrace_dump_on_exit backtrace_dump_prefix=$tmp/est" --log /dev/null -- testdata/sampled 2>/dev/null
			read -r n b < <(dump_totals "$(ls "$tmp"/est.*.exit.txt)")
			if ((interval == 0)); then
				exact="$n $b"
				break
			fi
			read -r en eb <<<"$exact"
			errs_n+="$(awk -v a="$n" -v e="$en" 'BEGIN {printf "%.2f", 100 * (a - e) / e}') "
			errs_b+="$(awk -v a="$b" -v e="$eb" 'BEGIN {printf "%.2f", 100 * (a - e) / e}') "
		done
		if ((interval == 0)); then
			echo "  exact tracing: $exact (blocks, bytes)"
			continue
		fi
		summary() {
			tr ' ' '\n' | grep -v '^$' | awk '{
				a = $1 < 0 ? -$1 : $1; s += a; if (a > m) m = a
				sum += $1; sq += $1 * $1; n++
			} END {
				mean = sum / n; sd = n > 1 ? sqrt((sq - n * mean * mean) / (n - 1)) : 0
				printf "mean |error| %.2f%%, max %.2f%%, mean error %+.2f%% +- %.2f%% (95%%)", s / n, m, mean, 1.96 * sd / sqrt(n) }'
		}
		echo "  --sample-bytes $interval: blocks $(summary <<<"$errs_n"); bytes $(summary <<<"$errs_b")"
	done
}
if [[ -n ${SAMPLE_ONLY:-} ]]; then
	echo "sampling's estimates; load average at start: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
	sample_rows
	exit 0
fi
if [[ -n ${PROCS_ONLY:-} ]]; then
	echo "a followed child, side by side; kernel $(uname -r); load average at start: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
	bench procs
	echo
	echo "targets (the median over the rounds of each round's ratio):"
	procs_row
	exit 0
fi
if [[ -n ${REAL_ONLY:-} ]]; then
	echo "the real programs, side by side; kernel $(uname -r); load average at start: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
	for wl in "${realprogs[@]}"; do
		bench "$wl"
	done
	echo
	echo "targets (the median over the rounds of each round's ratio):"
	real_rows
	exit 0
fi
if [[ -n ${CHAIN_ONLY:-} ]]; then
	echo "chain: slopes from $SLOPE_N to $((SLOPE_N * 10)) pairs, $ROUNDS rounds; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	slope_row 0 "LAG 0"
	slope_row 256 "LAG 256"
	exit 0
fi
if [[ -n ${BUSY_ONLY:-} ]]; then
	echo "--all's cost to a process running along; load average at start: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
	busy_rows
	exit 0
fi
if [[ -n ${BUILD_ONLY:-} ]]; then
	echo "--all's cost to a build; load average at start: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
	build_rows
	exit 0
fi
if [[ -n ${AUDIT_ONLY:-} ]]; then
	echo "--all's cost, sampling on and off; load average at start: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
	audit_rows
	build_rows
	busy_rows
	exit 0
fi
if [[ -n ${INJECT_ONLY:-} ]]; then
	echo "chain: slopes from $SLOPE_N to $((SLOPE_N * 10)) pairs, $ROUNDS rounds; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	inject_row 0 "LAG 0"
	inject_row 256 "LAG 256"
	exit 0
fi
echo "malloc debug overhead, side by side; kernel $(uname -r); load average at start: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
# The figures depend on the kernel: say which speed-ups this one has.
bin/mdtrace --check 2>/dev/null | grep -E '^  (yes|no ) +(uprobe_multi|optimized uprobes|kprobes)' | sed 's/^  /  kernel feature: /' || true
workloads=(pairs pairs_mt)
if command -v sqlite3 >/dev/null 2>&1; then
	workloads+=(sqlite3)
else
	echo "sqlite3 not installed: its workload is skipped"
fi
for wl in "${workloads[@]}" "${realprogs[@]}" newpairs chain chainfp procs; do
	bench "$wl"
done
echo
echo "* valgrind rows: median of $SLOW_ROUNDS rounds. spread: (max - min) / median. sqlite3's \"on true\":"
echo "  ms for the same configuration running /bin/true, its start and exit alone; \"stmt cpu\": ms of CPU"
echo "  (user and system) of sqlite3's statements by its own timer, the program's work without any start or exit."
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg); other work on the machine makes the figures noisy."

echo
echo "targets (the median over the rounds of each round's ratio):"
for wl in "${workloads[@]}"; do
	target "$wl" "attach style bt=16 / floor" attach floor "<=" 1.10
	target "$wl" "  the same / floor at its probe points" attach pointfloor "<=" 1.10
	target "$wl" "attach style / with sites (sites cheaper by)" attach sites ">=" 5
	target "$wl" "  the same, sites with --no-batch (for information)" attach nobatch ">=" 5
	target "$wl" "with sites / heaptrack" sites heaptrack "<" 1
	target "$wl" "shim alone / native" shim native "<=" 3
done
for wl in "${workloads[@]}"; do
	# What the sites' target can reach at best, with BPF programs that
	# cost nothing: the probes' own costs.
	printf '  %-9s %-44s %8s  (for information)\n' "$wl" "  bound: floor at probe points / site floor" \
		"$(paired "${runs[$wl/pointfloor]:-}" "${runs[$wl/sitefloor]:-}")x"
	printf '  %-9s %-44s %8s  (for information)\n' "$wl" "  the same, batching: / batch floor" \
		"$(paired "${runs[$wl/pointfloor]:-}" "${runs[$wl/batchfloor]:-}")x"
done
procs_row
for wl in "${workloads[@]}" newpairs; do
	printf '  %-9s %-44s %8s  (for information)\n' "$wl" "attach style on jemalloc / on glibc" \
		"$(paired "${runs[$wl/jeattach]:-}" "${runs[$wl/attach]:-}")x"
done
real_rows
# Unwinding without frame pointers: the same modes on the same chain with
# and without frame pointers, and against heaptrack, which unwinds each
# stack with libunwind.
printf '  %-9s %-44s %8s  %-2s %-5s %s\n' chain "attach style: no frame pointers / with them" \
	"$(paired "${runs[chain/attach]:-}" "${runs[chainfp/attach]:-}")x" "<=" 1.5 \
	"$(awk -v r="$(paired "${runs[chain/attach]:-}" "${runs[chainfp/attach]:-}")" 'BEGIN {print r != "" && r <= 1.5 ? "PASS" : "MISS"}')"
# At N pairs, each tool's start-up weighs in; the slopes below do without.
printf '  %-9s %-44s %8s  (for information: start-up included)\n' chain "heaptrack / with sites, at $N pairs" \
	"$(paired "${runs[chain/heaptrack]:-}" "${runs[chain/sites]:-}")x"
# Attaching to a running Python: from mdtrace's start to its probes live,
# with the unwind tables of every file the process maps loaded (the ready
# file is written once they are). Debian's python3.11 maps 40 files.
attach_ready() {
	local py=/usr/bin/python3.11 pid t0 t1 m r times=""
	if [[ ! -x $py ]]; then
		printf '  %-9s %-44s %8s  (no %s)\n' python3 "attach -p --backtrace: ready in, s" n/a "$py"
		return
	fi
	for ((r = 0; r < ROUNDS; r++)); do
		sleep "$SETTLE"
		"$py" -c 'import time; time.sleep(60)' &
		pid=$!
		sleep 0.2
		rm -f "$tmp/ready"
		t0=$EPOCHREALTIME
		bin/mdtrace -p "$pid" --backtrace --ready-file "$tmp/ready" --log /dev/null 2>/dev/null &
		m=$!
		while [[ ! -e $tmp/ready ]] && kill -0 "$m" 2>/dev/null; do sleep 0.005; done
		t1=$EPOCHREALTIME
		if [[ -e $tmp/ready ]]; then
			times+="$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}') "
		fi
		kill -INT "$m" 2>/dev/null || true
		wait "$m" 2>/dev/null || true
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	local med
	med=$(median <<<"$times")
	printf '  %-9s %-44s %8s  %-2s %-5s %s\n' python3 "attach -p --backtrace: ready in, s" "${med:-n/a}" "<" 1 \
		"$(awk -v r="$med" 'BEGIN {print r != "" && r < 1 ? "PASS" : "MISS"}')"
}
attach_ready
audit_rows
build_rows
busy_rows
echo "  chain: slopes from $SLOPE_N to $((SLOPE_N * 10)) pairs; LAG 0 frees each block at once, LAG 256 256 pairs later"
slope_row 0 "LAG 0"
slope_row 256 "LAG 256"
inject_row 0 "LAG 0"
inject_row 256 "LAG 256"
printf '  %-9s %-44s %8s  (for information)\n' newpairs "attach style: new/delete / malloc/free pairs" \
	"$(ratio "${med[newpairs/attach]:-}" "${med[pairs/attach]:-}")x"
printf '  %-9s %-44s %8s  (for information)\n' newpairs "with sites: new/delete / malloc/free pairs" \
	"$(ratio "${med[newpairs/sites]:-}" "${med[pairs/sites]:-}")x"
for wl in "${workloads[@]}"; do
	printf '  %-9s %-44s %8s  (for information)\n' "$wl" "shim sampling 4096 / shim sites, no probes" \
		"$(ratio "${med[$wl/shimsample]:-}" "${med[$wl/shimsites]:-}")x"
done
for wl in "${workloads[@]}"; do
	printf '  %-9s %-44s %8s  (for information)\n' "$wl" "with sites / --sample-bytes 4096, 65536" \
		"$(ratio "${med[$wl/sites]:-}" "${med[$wl/sample4k]:-}")x, $(ratio "${med[$wl/sites]:-}" "${med[$wl/sample64k]:-}")x"
done

echo
sample_rows
echo
echo "record_allocs in user space, on a recorded fixture (one core):"
GOMAXPROCS=1 go test -run '^$' -bench 'AppendRecord|RecordWriter|ReadRecords' -benchmem ./output | grep -E '^Benchmark'
echo
echo "symbolization:"
go test -run '^$' -bench 'Symbolize' -benchtime 3x -benchmem ./stacks | grep -E '^Benchmark'

# Issue 7's figures, measured in one run: the heap dump of a million live
# allocations (output), reading them from the live table (tracer, as
# root), the kernel memory per tracked allocation, and record_allocs
# events per second, from the ring buffer (tracer) and through mdtrace's
# recorder to its file (cmd/mdtrace). Each is printed against its target.
echo
echo "a million live allocations, kernel memory, record_allocs throughput:"
i7=$tmp/issue7
: >"$i7"
# gobench ARGS: go test -bench ARGS, its output added to $i7.
gobench() {
	if ! go test -run '^$' -bench "$@" >>"$i7" 2>&1; then
		tail -20 "$i7" >&2
		echo "bench.sh: go test -bench $* failed" >&2
		exit 1
	fi
}
gobench 'HeapDump1M' -benchtime 1x ./output
gobench 'Snapshot1M|SnapshotDump1M|KernelBytesPerAlloc|Fork1M' -benchtime 1x -benchmem ./tracer
gobench 'RecordStream' -benchtime 3000000x -benchmem ./tracer
gobench 'Recorder' -benchtime 2x -benchmem ./session
gobench 'UnwindTables' -benchtime 1x ./tracer
# The check for unreachable memory: its copy of the heap (the process
# stopped meanwhile) and its marking, folding and report.
gobench 'ReadRanges' -benchtime 3x ./tracer
gobench 'Scan' -benchtime 1x ./unreach
grep -E '^Benchmark|kmem:|SKIP' "$i7" | sed -e 's/^ *kmem_bench_test.go:[0-9]*: kmem: /    /'
# metric BENCHMARK UNIT: the figure of UNIT on BENCHMARK's line, if any.
metric() {
	awk -v b="$1" -v u="$2" '/^Benchmark/ {
		name = $1; sub(/-[0-9]+$/, "", name)
		if (name != b) next
		for (i = 3; i < NF; i++) if ($(i + 1) == u) { print $i; exit }
	}' "$i7"
}
# goal TEXT VALUE UNIT OP LIMIT: prints VALUE against "OP LIMIT", PASS or MISS.
goal() {
	local text=$1 v=$2 unit=$3 op=$4 limit=$5 verdict
	if [[ -z $v ]]; then
		printf '  %-58s %12s  %-2s %-8s %s\n' "$text" "n/a" "$op" "$limit" "(no figure: needs root for the tracer's)"
		return
	fi
	verdict=$(awk -v v="$v" -v l="$limit" -v op="$op" 'BEGIN {
		ok = op == "<=" ? v <= l : op == ">=" ? v >= l : v < l
		print ok ? "PASS" : "MISS" }')
	printf '  %-58s %12s  %-2s %-8s %s\n' "$text" "$(awk -v v="$v" 'BEGIN {printf(v >= 1e6 ? "%.2fM" : v >= 100 ? "%.0f" : "%.2f", v >= 1e6 ? v / 1e6 : v)}') $unit" "$op" "$limit" "$verdict"
}
rsec=$(metric BenchmarkRecordStream/read ns/op)
rline=$(metric BenchmarkRecordStream/read+line ns/op)
keep=$(metric BenchmarkRecorder ns/event-keep)
write=$(metric BenchmarkRecorder ns/event-write)
live=""
if [[ -n $rsec && -n $keep ]]; then
	live=$(awk -v a="$rsec" -v b="$keep" 'BEGIN {print 1e9 / (a + b)}')
fi
echo
echo "targets:"
goal "heap dump of 1M allocations: Snapshot, UniqueList, file" "$(metric BenchmarkSnapshotDump1M s/dump)" s "<" 2
goal "  its process's peak RSS" "$(metric BenchmarkSnapshotDump1M MB-peak-RSS)" MB "<" 300
goal "  from a snapshot in memory: UniqueList + WriteHeapDump" "$(metric BenchmarkHeapDump1M/plain s/dump)" s "<" 2
goal "  the same with bt_info lines (backtrace_full, symbolized)" "$(metric BenchmarkHeapDump1M/full s/dump)" s "<" 2
goal "  peak RSS, snapshot in memory" "$(metric BenchmarkHeapDump1M/plain MB-peak-RSS)" MB "<" 300
goal "  peak RSS with bt_info lines" "$(metric BenchmarkHeapDump1M/full MB-peak-RSS)" MB "<" 300
goal "  Probes.Snapshot alone (through the kernel: $(metric BenchmarkSnapshot1M/syscalls s/snapshot) s)" "$(metric BenchmarkSnapshot1M/mapped s/snapshot)" s "<" 2
goal "kernel bytes per live allocation, 200K: table + stacks (memlock)" "$(metric BenchmarkKernelBytesPerAlloc B/alloc-memlock-200k)" B "<=" 100
goal "  the same at 1M" "$(metric BenchmarkKernelBytesPerAlloc B/alloc-memlock-1m)" B "<=" 100
goal "  all maps at 1M, memory cgroup growth since before loading" "$(metric BenchmarkKernelBytesPerAlloc B/alloc-memcg-1m)" B "<=" 100
echo "    all maps at 200K: $(metric BenchmarkKernelBytesPerAlloc B/alloc-memcg-200k) B (memory cgroup); at 50K, with the second tier made: $(metric BenchmarkKernelBytesPerAlloc B/alloc-memlock-50k) B (memlock), $(metric BenchmarkKernelBytesPerAlloc B/alloc-memcg-50k) B"
echo "    before any allocation: $(metric BenchmarkKernelBytesPerAlloc MB-fixed-memlock) MB (memlock), $(metric BenchmarkKernelBytesPerAlloc MB-fixed-memcg) MB (memory cgroup)"
goal "unwind tables of libc, libstdc++, python3.11: all maps" "$(metric BenchmarkUnwindTables MB-unwind-maps)" MB "<=" 8
echo "    their entries: $(metric BenchmarkUnwindTables entries) ($(metric BenchmarkUnwindTables MB-tables) MB of the shared array), read and loaded in $(metric BenchmarkUnwindTables s/first-load) s"
echo "  zygote fork of a process with 1M live blocks: the copy $(metric BenchmarkFork1M s/fork) s (the child held meanwhile), its drop $(metric BenchmarkFork1M s/forget) s"
goal "record_allocs events/s: ring buffer decode + output line" "$(metric BenchmarkRecordStream/read+line events/s)" "ev/s" ">=" 2000000
goal "  while tracing: ring buffer decode + recorder keeps it" "$live" "ev/s" ">=" 2000000
goal "  at the end: sorted and written to the file" "$(awk -v w="$write" 'BEGIN {if (w > 0) print 1e9 / w}')" "ev/s" ">=" 2000000
echo "  record_allocs per event: ring buffer ${rsec:-?} ns, with the line ${rline:-?} ns; recorder: keep ${keep:-?} ns, write ${write:-?} ns"
echo "  (end to end $(awk -v a="$rsec" -v b="$keep" -v c="$write" 'BEGIN {if (a + b + c > 0) printf "%.2fM", 1e3 / (a + b + c)}') events/s); allocations per event: ring buffer $(metric BenchmarkRecordStream/read allocs/op), with the line $(metric BenchmarkRecordStream/read+line allocs/op)"
read=$(metric BenchmarkReadRanges s/GB)
mark=$(metric BenchmarkScan s/GB)
printf '  %-58s %12s  (for information)\n' "check for unreachable memory, s per GB of heap" \
	"$(awk -v a="$read" -v b="$mark" 'BEGIN {if (a != "" && b != "") printf "%.2f s", a + b; else print "n/a"}')"
echo "    the copy, the process stopped: ${read:-?} s; marking, folding, report: ${mark:-?} s ($(metric BenchmarkScan blocks) blocks of 32 to 2048 bytes, a word in eight a pointer to a random block: a worst case for the caches)"
echo "  One sample each on this machine: figures vary by tens of percent between runs."

# Exit reports of a million leaked blocks: time and memory (its own
# script, which runs alone too).
echo
ROUNDS=$ROUNDS SETTLE=$SETTLE scripts/bench_scale.sh
