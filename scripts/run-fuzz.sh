#!/bin/sh
# Runs every libFuzzer target in BUILD for SECONDS each, from the seed corpus
# in fuzz/corpus/<target>/, into a scratch corpus that is not committed.
# Prints one line per target: executions and whether it crashed.
# FUZZ_RUNS=N (environment) also stops each target after N executions.
set -eu
build=$1
seconds=$2
status=0
runs_opt=""
if [ -n "${FUZZ_RUNS:-}" ]; then
    runs_opt="-runs=$FUZZ_RUNS"
fi
for bin in "$build"/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    seeds="fuzz/corpus/$name"
    work="fuzz/corpus-run/$name"
    mkdir -p "$work"
    log="$build/$name.log"
    # shellcheck disable=SC2086
    if "$bin" -max_total_time="$seconds" $runs_opt -print_final_stats=1 -artifact_prefix="$build/$name-" \
        "$work" "$seeds" >"$log" 2>&1; then
        execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
        secs=$(grep -E '^stat::' "$log" >/dev/null && grep -Eo 'DONE .* exec/s: [0-9]+' "$log" | tail -1)
        echo "fuzz $name: ${execs:-?} executions (limit ${seconds}s${FUZZ_RUNS:+ or $FUZZ_RUNS runs}), no crash; ${secs:-}"
    else
        echo "fuzz $name: FAILED (see $log)"
        tail -40 "$log"
        status=1
    fi
done
exit $status
