#!/usr/bin/env bash
# Side-by-side cost of tracing malloc/free pairs, as ratios measured in one
# run: the same program natively and under mdtrace with several options.
# Each configuration runs ROUNDS times, interleaved, and the median counts.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-20000}
ROUNDS=${ROUNDS:-5}
prog=testdata/pairs

declare -A label=(
	[native]="native"
	[floor]="empty probes (the floor)"
	[leak]="mdtrace leak_track (no backtraces)"
	[bt16]="mdtrace backtrace=16"
	[bt64]="mdtrace backtrace=64"
)
declare -A cmd=(
	[native]="$prog $N"
	[floor]="bin/mdbench -- $prog $N"
	[leak]="bin/mdtrace -o leak_track --log /dev/null -- $prog $N"
	[bt16]="bin/mdtrace -o backtrace=16 --log /dev/null -- $prog $N"
	[bt64]="bin/mdtrace -o backtrace=64 --log /dev/null -- $prog $N"
)
order=(native floor leak bt16 bt64)
declare -A samples
for ((r = 0; r < ROUNDS; r++)); do
	for k in "${order[@]}"; do
		ns=$(${cmd[$k]} 2>/dev/null | awk '/^pairs/ {print $3}')
		samples[$k]+="$ns "
	done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(echo "${samples[native]}" | median)
floor=$(echo "${samples[floor]}" | median)
printf '%-40s %12s %10s %9s\n' "malloc/free pairs ($N, median of $ROUNDS)" "ns/pair" "x native" "x floor"
for k in "${order[@]}"; do
	m=$(echo "${samples[$k]}" | median)
	printf '%-40s %12.1f %10.1f %9.2f\n' "${label[$k]}" "$m" "$(echo "$m $base" | awk '{print $1/$2}')" "$(echo "$m $floor" | awk '{print $1/$2}')"
done

echo
echo "record_allocs in user space, on a recorded fixture (one core):"
GOMAXPROCS=1 go test -run '^$' -bench 'AppendRecord|RecordWriter|ReadRecords' -benchmem ./output | grep -E '^Benchmark'
echo
echo "symbolization:"
go test -run '^$' -bench 'Symbolize' -benchtime 3x -benchmem ./stacks | grep -E '^Benchmark'
