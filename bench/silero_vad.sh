#!/usr/bin/env bash
# Silero VAD benchmark: hark's CPU path (bench/bench_silero_vad.c) next to ONNX Runtime running
# the original silero_vad.onnx (bench/silero_vad_ort.js, npm onnxruntime-node), both with one
# thread pinned to the same core, in the same run; windows (32 ms of 16 kHz audio) per second and
# the ratio. The streams of a size run as one batch (hark: stepped together; ORT: the batch
# dimension of each call).
# MODES=cpu,gpu adds the GPU kernel (silero_vad_gpu.cu; one launch for all streams, host audio to
# host probabilities) on the same files, and its ratio to hark's CPU path in the same run.
# Usage: [MODES=cpu|cpu,gpu] bench/silero_vad.sh [seconds=60] [streams=1,8,64]   (from the
#        repository root, after `make bench`; ONNX Runtime comes from tools/silero_vad_reference.sh's
#        cache; MODEL_DIR=a converted model skips the conversion, as on the GPU machine)
set -euo pipefail
secs=${1:-60}
streams=${2:-1,8,64}
cache=/tmp/hark-test-cache-$(id -u)
onnx=${ONNX:-../shared/data/models/silero-vad/silero_vad.onnx}
wav=${WAV:-../shared/data/audio/en/wav/jfk.wav}
model=${MODEL_DIR:-$cache/bench-silero_vad}
[ -f "$model/1/model.safetensors" ] ||
    /usr/bin/python3 tools/convert_silero_vad.py --onnx "$onnx" --output "$model" >/dev/null
export HARK_ORT_DIR=${HARK_ORT_DIR:-$cache/ort}
core=$(taskset -pc $$ 2>/dev/null | sed 's/.*: *//; s/[,-].*//')
pin=(taskset -c "${core:-0}")
command -v taskset >/dev/null || pin=()
out=$(mktemp -d)
OPENBLAS_NUM_THREADS=1 "${pin[@]}" build/bench/bench_silero_vad "$model" "$wav" "$secs" "$streams" \
    "${MODES:-cpu}" > "$out/hark.jsonl"
if [ -d "$HARK_ORT_DIR/node_modules/onnxruntime-node" ]; then
    "${pin[@]}" node bench/silero_vad_ort.js "$onnx" "$wav" "$secs" "$streams" > "$out/ort.jsonl"
else
    echo "onnxruntime-node is not installed (bash tools/silero_vad_reference.sh): hark only" >&2
    : > "$out/ort.jsonl"
fi
/usr/bin/python3 - "$out/hark.jsonl" "$out/ort.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
h = [r for r in rows if r["impl"] == "hark"]
g = {r["streams"]: r for r in rows if r["impl"] == "hark-gpu"}
o = {j["streams"]: j for j in (json.loads(l) for l in open(sys.argv[2]) if l.startswith("{"))}
def cell(r, w=11):
    return f"{r['windows_per_s']:{w}.0f}" if r else f"{'-':>{w}}"
print(f"{'streams':>7} {'hark win/s':>11} {'hark RTFx':>10} {'ORT win/s':>10} {'ORT RTFx':>9} "
      f"{'hark/ORT':>9} {'GPU win/s':>11} {'GPU RTFx':>10} {'GPU/hark':>9}")
for s in sorted({r["streams"] for r in rows}):
    r = next((x for x in h if x["streams"] == s), None)
    p, q = o.get(s), g.get(s)
    ratio = lambda a, b: f"{a['windows_per_s'] / b['windows_per_s']:8.2f}x" if a and b else f"{'-':>9}"
    print(f"{s:7d} {cell(r)} " + (f"{r['rtfx']:10.0f} " if r else f"{'-':>10} ")
          + (f"{p['windows_per_s']:10.0f} {p['rtfx']:9.0f} " if p else f"{'-':>10} {'-':>9} ")
          + ratio(r, p) + f" {cell(q)} " + (f"{q['rtfx']:10.0f} " if q else f"{'-':>10} ")
          + ratio(q, r))
PYEOF
echo "raw results: $out"
