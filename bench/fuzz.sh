#!/usr/bin/env bash
# Fuzz campaign (issue 23): builds every libFuzzer target of tests/fuzz (fuzz_*.c, through the
# Makefile's rules: clang -fsanitize=fuzzer,address,undefined) and runs each for FUZZ_SECONDS
# (default 600) on a copy of its seed corpus, one after the other; prints the executions, their
# rate and the corpus size per target, and exits 1 when a target found a crash, a leak or an
# undefined behaviour (its reproducer is kept in the output folder).
# Usage: bench/fuzz.sh [TARGET...]     (default: every tests/fuzz/fuzz_*.c; e.g. fuzz_grpc)
#   FUZZ_SECONDS=600  time per target    FUZZ_OUT=/tmp/hark-fuzz  logs, corpora, reproducers
#   BUILD=build       the Makefile's build folder
#   FUZZ_JOBS=1       targets run at once (a machine with more cores: all of them side by side)
#   FUZZ_BUILD=1      0: use the binaries already in $BUILD (a machine without clang)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-600}
out=${FUZZ_OUT:-/tmp/hark-fuzz}
build=${BUILD:-build}
[ "${FUZZ_BUILD:-1}" = 0 ] || command -v clang >/dev/null ||
    { echo "bench/fuzz.sh: needs clang (tools/install-deps.sh --dev)" >&2; exit 2; }

if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi

# the seed corpus of a target: tests/fuzz/corpus_<short name>, the audio decoder's is corpus/
seeds() {
    case "$1" in
    fuzz_audio_decode) echo tests/fuzz/corpus ;;
    fuzz_http_request) echo tests/fuzz/corpus_http ;;
    fuzz_kserve_request) echo tests/fuzz/corpus_kserve ;;
    *) echo "tests/fuzz/corpus_${1#fuzz_}" ;;
    esac
}

mkdir -p "$out"
if [ "${FUZZ_BUILD:-1}" != 0 ]; then
    echo "bench/fuzz.sh: building ${#targets[@]} target(s) into $build/"
    make -s BUILD="$build" "${targets[@]/#/$build/}"
fi

# one target: its run, then its table row into $out/<target>.row; 1 when it found something
run_one() {
    local t=$1 corpus="$out/$1.corpus" log="$out/$1.log" rc execs rate size result s
    rm -rf "$corpus" && mkdir -p "$corpus"
    s=$(seeds "$t")
    [ -d "$s" ] && cp -r "$s"/. "$corpus"/
    set +e
    "$build/$t" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$out/$t-" \
        "$corpus" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ -z "$execs" ]; then  # a crash stops the run before the final stats: the last status
        execs=$(grep -o '#[0-9]*' "$log" | tail -1 | tr -d '#')
    fi
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    size=$(find "$corpus" -type f | wc -l)
    result=clean
    [ $rc -eq 0 ] || result="FAILED (exit $rc, see $log)"
    printf '%-22s %8s %14s %12s %8s  %s\n' "$t" "$secs" "${execs:-?}" "${rate:-?}" "$size" \
        "$result" >"$out/$t.row"
    [ $rc -eq 0 ]
}

jobs_max=${FUZZ_JOBS:-1}
pids=()
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 1; done
    run_one "$t" &
    pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
printf '%-22s %8s %14s %12s %8s  %s\n' target seconds executions "exec/s" corpus result
for t in "${targets[@]}"; do cat "$out/$t.row"; done
exit $fail
