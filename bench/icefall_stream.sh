#!/usr/bin/env bash
# Streaming Zipformer benchmark (issue 17): the zipformer recipe's full-size causal Zipformer2
# (the converter's defaults: 6 stacks 2,2,3,4,3,2 layers, dims 192..512, with generated weights
# from tests/model/icefall/zipformer_random_ckpt.py) converted for streaming with CHUNK 50 Hz
# frames per chunk and LEFT frames of left context, then `hark bench --chunk`: B streams stepped
# together on the GPU (their caches on the device), one chunk each per step, host features in and
# encoder frames out; prints one JSON line per batch (ms per step median / p99 / max, streams kept
# in real time) into $OUT_DIR/hark.jsonl.
# Usage: bench/icefall_stream.sh [BATCHES]   (default 1,64,256,512,1024)
# Variables: CHUNK (16), LEFT (128), MIN_TIME (2 s per batch), DEVICE (cuda:0), HARK
# (build/hark), PYTHON (python3 with torch and numpy), OUT_DIR (/tmp/hark-icefall-stream).
set -euo pipefail
batches=${1:-1,64,256,512,1024}
HARK=${HARK:-build/hark}; PY=${PYTHON:-python3}; out=${OUT_DIR:-/tmp/hark-icefall-stream}
chunk=${CHUNK:-16}; left=${LEFT:-128}
mkdir -p "$out"
flags="--causal True --chunk-size $chunk --left-context-frames $left"
if [ ! -f "$out/model/model.json" ]; then
    {
        printf '<blk> 0\n<sos/eos> 1\n<unk> 2\n'
        for i in $(seq 3 499); do printf '\xe2\x96\x81w%d %d\n' "$i" "$i"; done
    } > "$out/tokens.txt"
    $PY tests/model/icefall/zipformer_random_ckpt.py "$out/ckpt.pt" $flags >/dev/null
    $PY tools/convert_icefall.py --recipe zipformer --checkpoint "$out/ckpt.pt" \
        --tokens "$out/tokens.txt" --output "$out/model" $flags >/dev/null
fi
"$HARK" bench --model "$out/model" --device "${DEVICE:-cuda:0}" --chunk --batch "$batches" \
    --min-time "${MIN_TIME:-2}" | tee "$out/hark.jsonl"
