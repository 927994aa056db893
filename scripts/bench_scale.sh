#!/usr/bin/env bash
# Exit reports at scale: testdata/manyleaks leaks BLOCKS small blocks
# (1,000,000) from four call chains and exits, and mdtrace writes, at its
# exit, its leak_track report (the log, about 1.1 KB a block in Android's
# format) or its heap dump (backtrace_dump_on_exit). Measured:
#   - from the process's exit (manyleaks writes the time as it exits) to
#     mdtrace's own exit, per million blocks;
#   - mdtrace's peak RSS (GNU time's %M, the kernel's high-water mark of
#     its resident memory) less that of the same run with FEW blocks (its
#     fixed cost), per block. It counts the live table's tiers, which
#     mdtrace maps into its memory (about 45 bytes a block at 1M).
# Medians of ROUNDS runs; each run's output removed and synced before
# the next, so that writing back the last one does not slow it.
#
# And start-up: from mdtrace's start to the launched command's main
# (testdata/manyleaks 0, which writes the time as it returns from main at
# once), without options and with backtrace leak_track, against the same
# program run natively. Medians of STARTS runs.
#
# Usage: scripts/bench_scale.sh   (as root, after make build testprogs;
# make bench runs it at its end)
# Environment: BLOCKS (1000000), FEW (1000), ROUNDS (3), STARTS (10),
# SETTLE (0.3).
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
BLOCKS=${BLOCKS:-1000000}
FEW=${FEW:-1000}
ROUNDS=${ROUNDS:-3}
STARTS=${STARTS:-10}
SETTLE=${SETTLE:-0.3}
for f in bin/mdtrace testdata/manyleaks; do
	[[ -e $f ]] || { echo "bench_scale.sh: no $f: run make build testprogs" >&2; exit 1; }
done
if [[ ! -x /usr/bin/time ]]; then
	echo "bench_scale.sh: no /usr/bin/time (Debian's time package) to measure the peak RSS" >&2
	exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mdtrace-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}'; }

# exit_run KIND N: one run, "SECONDS KB": from the process's exit to
# mdtrace's, and mdtrace's peak RSS.
exit_run() {
	local kind=$1 n=$2 opts end ex rss
	case $kind in
	leak) opts="backtrace leak_track" ;;
	dump) opts="backtrace backtrace_dump_on_exit backtrace_dump_prefix=$tmp/dump" ;;
	esac
	rm -f "$tmp"/log "$tmp"/dump.*
	sync
	sleep "$SETTLE"
	/usr/bin/time -f 'rss %M' -o "$tmp/time" bin/mdtrace -o "$opts" --log "$tmp/log" -- testdata/manyleaks "$n" >/dev/null 2>"$tmp/err" || {
		echo "bench_scale.sh: mdtrace failed:" >&2
		cat "$tmp/err" >&2
		return 1
	}
	end=$EPOCHREALTIME
	ex=$(awk '/^exit / {print $2}' "$tmp/err")
	rss=$(awk '/^rss / {print $2}' "$tmp/time")
	awk -v a="$ex" -v b="$end" -v r="$rss" 'BEGIN {printf "%.3f %d\n", b - a, r}'
}

# row TEXT VALUE OP LIMIT: VALUE against "OP LIMIT", PASS or MISS.
row() {
	printf '  %-58s %8s  %-2s %-5s %s\n' "$1" "${2:-n/a}" "$3" "$4" \
		"$(awk -v v="${2:-}" -v l="$4" -v op="$3" 'BEGIN {
			if (v == "") { print "MISS"; exit }
			ok = op == "<=" ? v <= l : v < l
			print ok ? "PASS" : "MISS" }')"
}

echo "exit reports of $BLOCKS leaked blocks (testdata/manyleaks), medians of $ROUNDS runs:"
for kind in leak dump; do
	secs="" rsss="" fixed=""
	for ((r = 0; r < ROUNDS; r++)); do
		read -r s k <<<"$(exit_run "$kind" "$BLOCKS")"
		secs+="$s " rsss+="$k "
		read -r _ k <<<"$(exit_run "$kind" "$FEW")"
		fixed+="$k "
	done
	s=$(median <<<"$secs") k=$(median <<<"$rsss") f=$(median <<<"$fixed")
	per_m=$(awk -v s="$s" -v n="$BLOCKS" 'BEGIN {printf "%.2f", s * 1e6 / n}')
	per_b=$(awk -v k="$k" -v f="$f" -v n="$BLOCKS" -v m="$FEW" 'BEGIN {printf "%.0f", (k - f) * 1024 / (n - m)}')
	case $kind in
	leak) what="leak_track report (log)" ;;
	dump) what="heap dump at exit" ;;
	esac
	row "$what: process exit to mdtrace exit, s per 1M blocks" "$per_m" "<=" 1
	row "  mdtrace's peak RSS beyond its fixed cost, B per block" "$per_b" "<=" 100
	echo "    peak RSS $((k / 1024)) MB at $BLOCKS blocks, $((f / 1024)) MB at $FEW; exit to exit $s s (runs: $secs)"
done

# start_run [OPTIONS]: one launch, the ms from its start to the command's
# main; natively without OPTIONS "native".
start_run() {
	local t0 ex
	sleep "$SETTLE"
	t0=$EPOCHREALTIME
	if [[ ${1:-} == native ]]; then
		testdata/manyleaks 0 2>"$tmp/err" || return 1
	else
		bin/mdtrace "$@" --log "$tmp/log" -- testdata/manyleaks 0 >/dev/null 2>"$tmp/err" || return 1
	fi
	ex=$(awk '/^exit / {print $2}' "$tmp/err")
	awk -v a="$t0" -v b="$ex" 'BEGIN {printf "%.1f\n", (b - a) * 1000}'
}

echo
echo "start-up: from the start to the launched command's main, ms, medians of $STARTS runs:"
for cfg in native plain bt; do
	times=""
	for ((r = 0; r < STARTS; r++)); do
		case $cfg in
		native) t=$(start_run native) ;;
		plain) t=$(start_run) ;;
		bt) t=$(start_run -o "backtrace leak_track") ;;
		esac
		times+="$t "
	done
	m=$(median <<<"$times")
	case $cfg in
	native) printf '  %-58s %8s  (for information)\n' "natively" "$m" ;;
	plain) row "mdtrace -- CMD" "$m" "<=" 20 ;;
	bt) row "mdtrace -o \"backtrace leak_track\" -- CMD" "$m" "<=" 20 ;;
	esac
done
