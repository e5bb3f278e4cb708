#!/bin/sh
# Runs every libFuzzer target in BUILD for SECONDS each, from the seed corpus
# in fuzz/corpus/<target>/, into a scratch corpus that is not committed.
# Prints one line per target: executions and whether it crashed.
set -eu
build=$1
seconds=$2
status=0
for bin in "$build"/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    seeds="fuzz/corpus/$name"
    work="fuzz/corpus-run/$name"
    mkdir -p "$work"
    log="$build/$name.log"
    if "$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$build/$name-" \
        "$work" "$seeds" >"$log" 2>&1; then
        execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
        echo "fuzz $name: ${execs:-?} executions in ${seconds}s, no crash"
    else
        echo "fuzz $name: FAILED (see $log)"
        tail -40 "$log"
        status=1
    fi
done
exit $status
