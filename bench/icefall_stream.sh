#!/usr/bin/env bash
# Streaming Zipformer benchmark (issue 17), one machine, one run: the zipformer recipe's full-size
# causal Zipformer2 (the converter's defaults: 6 stacks of 2,2,3,4,3,2 layers, dims 192..512;
# generated weights from tests/model/icefall/zipformer_random_ckpt.py) converted for streaming
# with CHUNK 50 Hz frames per chunk (CHUNK x 20 ms of audio) and LEFT frames of left context.
# 1. `hark bench --chunk`: B streams stepped together on the GPU (their caches in the device
#    pool), one chunk each per step, host features in and encoder frames out, in each of
#    PRECISIONS: ms per step (median / p99 / max) and the streams kept in real time, one JSON
#    line per batch and precision into $OUT_DIR/hark.jsonl. Then (PEER=1, the default, with an
#    icefall source tree at ICEFALL_ROOT and the import shims at SHIMS) icefall's own streaming
#    step on the same GPU and checkpoint
#    (bench/icefall_zf_peer.py: its batched-vs-alone check, then PEER_MODES fp32,fp16 at
#    PEER_BATCHES) into $OUT_DIR/peer.jsonl.
# 2. (SERVE=1, the default) the same model served by `hark serve` under sequence batching
#    (sherpa's model_repo_streaming contract, model `transducer`), the encoder on the GPU
#    (KIND_GPU, PRECISION), INSTANCES instances of SEQ sequence slots, STREAM_THREADS threads
#    each for the streams' front ends and searches (config.pbtxt stream_threads), greedy search,
#    driven by
#    `hark perf --streaming` at real-time pace with LEVELS streams, each a thread and a connection
#    sending SECONDS_PER_STREAM of speech-like audio again and again as sequences; prints each
#    level and the most streams sustained with p99 chunk latency <= 200 ms (CSV in
#    $OUT_DIR/streams.csv, the model's statistics in $OUT_DIR/stats.json).
# Usage: bench/icefall_stream.sh [BATCHES]   (default 1,64,256,512,1024)
# Variables: CHUNK (16), LEFT (128), MIN_TIME (2 s per batch), DEVICE (cuda:0), SERVE (1),
# PRECISIONS ("fp32 fp16 bf16"), PRECISION (fp16: the served model's), LEVELS (500:2000:500),
# INSTANCES (4), SEQ (512), STREAM_THREADS (4), METHOD (greedy_search), PERF_MS (8000),
# SECONDS_PER_STREAM (5), PROTOCOL (http|grpc), PORT (18200), HARK (build/hark), PYTHON (python3
# with torch and numpy), OUT_DIR (/tmp/hark-icefall-stream), PEER (1), ICEFALL_ROOT (.ext/icefall),
# SHIMS (../shared/tools/icefall), PEER_BATCHES (BATCHES), PEER_MODES (fp32,fp16).
set -euo pipefail
batches=${1:-1,64,256,512,1024}
HARK=${HARK:-build/hark}; PY=${PYTHON:-python3}; out=${OUT_DIR:-/tmp/hark-icefall-stream}
chunk=${CHUNK:-16}; left=${LEFT:-128}; seq=${SEQ:-512}; inst=${INSTANCES:-4}
mkdir -p "$out"
flags="--causal True --chunk-size $chunk --left-context-frames $left"
if [ ! -f "$out/repo/transducer/1/model.json" ]; then
    rm -rf "$out/repo"
    {
        printf '<blk> 0\n<sos/eos> 1\n<unk> 2\n'
        for i in $(seq 3 499); do printf '\xe2\x96\x81w%d %d\n' "$i" "$i"; done
    } > "$out/tokens.txt"
    $PY tests/model/icefall/zipformer_random_ckpt.py "$out/ckpt.pt" $flags >/dev/null
    $PY tools/convert_icefall.py --recipe zipformer --checkpoint "$out/ckpt.pt" \
        --tokens "$out/tokens.txt" --output "$out/repo/transducer" --streaming "$seq" \
        --method "${METHOD:-greedy_search}" $flags >/dev/null
fi
model=$out/repo/transducer
: > "$out/hark.jsonl"
for prec in ${PRECISIONS:-fp32 fp16 bf16}; do
    "$HARK" bench --model "$model" --device "${DEVICE:-cuda:0}" --chunk --batch "$batches" \
        --precision "$prec" --min-time "${MIN_TIME:-2}" | tee -a "$out/hark.jsonl"
done
root=${ICEFALL_ROOT:-.ext/icefall}
if [ "${PEER:-1}" = 1 ] && [ -d "$root/egs/librispeech/ASR/zipformer" ]; then
    dev=${DEVICE:-cuda:0}
    $PY bench/icefall_zf_peer.py --icefall-root "$root" --checkpoint "$out/ckpt.pt" \
        --shims "${SHIMS:-../shared/tools/icefall}" --device "${dev%%:*}" --check $flags |
        grep '^{' | tee "$out/peer_check.jsonl"
    $PY bench/icefall_zf_peer.py --icefall-root "$root" --checkpoint "$out/ckpt.pt" \
        --shims "${SHIMS:-../shared/tools/icefall}" --device "${dev%%:*}" \
        --batches "${PEER_BATCHES:-$batches}" --modes "${PEER_MODES:-fp32,fp16}" \
        --min-time "${MIN_TIME:-2}" $flags | grep '^{' | tee "$out/peer.jsonl"
elif [ "${PEER:-1}" = 1 ]; then
    echo "icefall_stream: no icefall tree at $root (ICEFALL_ROOT): icefall's own step not timed" >&2
fi
[ "${SERVE:-1}" = 1 ] || exit 0

cfg="$out/repo/transducer/config.pbtxt"
sed -i "s/    count: [0-9]*/    count: $inst/; s/kind: KIND_CPU/kind: KIND_GPU/" "$cfg"
sed -i '/key: "stream_threads"/d; /key: "precision"/d' "$cfg"
echo "parameters { key: \"stream_threads\" value { string_value: \"${STREAM_THREADS:-4}\" } }" >> "$cfg"
echo "parameters { key: \"precision\" value { string_value: \"${PRECISION:-fp16}\" } }" >> "$cfg"
secs=${SECONDS_PER_STREAM:-5}
$PY - "$out/clip.wav" "$secs" <<'PYEOF'
import math, random, struct, sys, wave
n = int(float(sys.argv[2]) * 16000); random.seed(7); x = []
for i in range(n):  # tones and noise in 0.2 s segments, speech-like levels
    if i % 3200 == 0:
        f, a = 0.02 + 0.3 * random.random(), 0.1 + 0.4 * random.random()
    x.append(a * math.sin(f * i) + 0.05 * (2 * random.random() - 1))
w = wave.open(sys.argv[1], "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
w.writeframes(b"".join(struct.pack("<h", int(max(-1, min(1, v)) * 32767)) for v in x)); w.close()
PYEOF
port=${PORT:-18200}; proto=${PROTOCOL:-http}
ulimit -n "$(ulimit -Hn)" || true
( exec "$HARK" serve --model-repository "$out/repo" --http-port "$port" --grpc-port $((port + 1)) \
    --metrics-port -1 --max-connections 100000 --max-audio-seconds $((secs + 1)) \
    --max-pass-seconds $((secs + 1)) > "$out/serve.log" 2>&1 ) &
pid=$!
for _ in $(seq 600); do
    curl -s -o /dev/null -w '%{http_code}' "localhost:$port/v2/models/transducer/ready" |
        grep -q 200 && break
    if ! kill -0 $pid 2>/dev/null || grep -q "startup:" "$out/serve.log"; then
        cat "$out/serve.log"; kill $pid 2>/dev/null; exit 1
    fi
    sleep 0.5
done
addr=localhost:$port; [ "$proto" = grpc ] && addr=localhost:$((port + 1))
"$HARK" perf --streaming -m transducer -u "$addr" -i "$proto" \
    --concurrency-range "${LEVELS:-500:2000:500}" -p "${PERF_MS:-8000}" \
    --input-data "$out/clip.wav" -f "$out/streams.csv" || status=$?
curl -s "localhost:$port/v2/models/transducer/stats" > "$out/stats.json" || true
kill -TERM $pid; wait $pid || true
tail -3 "$out/serve.log"
exit ${status:-0}
