#!/usr/bin/env bash
# silero_vad_reference.sh — produces the references tests/model/silero/test_silero_vad.c compares
# hark's Silero VAD with, outside the repository: ONNX Runtime's per-window probabilities of the
# original silero_vad.onnx on ../shared/data/audio/en (16 kHz, and decimated to 8 kHz), and the
# segments of silero-vad's get_speech_timestamps rules on them (default options, and a
# max_speech_duration_s split). Installs npm's onnxruntime-node (CPU build inside the package,
# ~300 MB, its download script skipped) once into the cache.
#
#   bash tools/silero_vad_reference.sh [OUT_DIR]
#
# OUT_DIR: $HARK_SILERO_REF, else /tmp/hark-test-cache-<uid>/silero_vad_ref (where the tests look).
# HARK_ORT_DIR: where onnxruntime-node is (installed there when absent); default the cache's ort/.
# SILERO_UTILS: silero-vad's utils_vad.py, to run its own get_speech_timestamps for the segments.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=/tmp/hark-test-cache-$(id -u)
out=${1:-${HARK_SILERO_REF:-$cache/silero_vad_ref}}
export HARK_ORT_DIR=${HARK_ORT_DIR:-$cache/ort}
onnx=../shared/data/models/silero-vad/silero_vad.onnx
audio=../shared/data/audio/en/wav
[ -f "$onnx" ] || { echo "silero_vad_reference: $onnx is absent" >&2; exit 1; }
command -v node >/dev/null ||
    { echo "silero_vad_reference: node is missing (apt-get install nodejs npm)" >&2; exit 1; }
if [ ! -d "$HARK_ORT_DIR/node_modules/onnxruntime-node" ]; then
    mkdir -p "$HARK_ORT_DIR"
    npm install --ignore-scripts --no-audit --no-fund --prefix "$HARK_ORT_DIR" onnxruntime-node
fi
mkdir -p "$out"
tmp=$(mktemp -d "$out/.tmp-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
utils=()
[ -n "${SILERO_UTILS:-}" ] && utils=(--silero-utils "$SILERO_UTILS")
for rate in 16000 8000; do
    node tools/silero_vad_reference.js --onnx "$onnx" --rate "$rate" \
        --output "$tmp/probs_$rate.json" "$audio"/*.wav
    /usr/bin/python3 tools/silero_vad_segments.py --probs "$tmp/probs_$rate.json" \
        --output "$tmp/segments_$rate.json" "${utils[@]}"
    /usr/bin/python3 tools/silero_vad_segments.py --probs "$tmp/probs_$rate.json" \
        --output "$tmp/segments_${rate}_split.json" --max-speech-duration-s 2 "${utils[@]}"
done
mv "$tmp"/*.json "$out"/
echo "silero_vad_reference: wrote $out"
