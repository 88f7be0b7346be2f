#!/usr/bin/env bash
# Streaming benchmark (issue 16), one machine, one run: the full-size LibriSpeech U2++ Conformer
# (generated weights, bench/wenet_peer.py export; needs WeNet's package in .ext/) served by
# `hark serve` under sequence batching, FP16 on the GPU, 640 ms chunks, CTC prefix beam search,
# driven by `hark perf --streaming` at real-time pace with LEVELS streams (each a thread and a
# connection sending the first SECONDS_PER_STREAM of SPEECH.wav again and again as sequences). Prints each level and the most
# streams sustained with p99 chunk latency <= 200 ms; CSV in $OUT_DIR/streams.csv, the model's
# statistics after the run (queue / compute input / infer / output) in $OUT_DIR/stats.json. Then, with the
# server stopped, WeNet's own streaming step on the same GPU and weights (bench/wenet_peer.py
# chunk): forward_chunk one stream at a time, and WeNet's modules stepping PEER_BATCHES streams
# together, FP32 and FP16, streams as long as the served ones, the same left context; one JSON
# line per (mode, batch) into $OUT_DIR/peer.jsonl.
# Usage: bench/stream_bench.sh SPEECH.wav [cuda:0]
# Knobs: LEVELS (A:B:S, default 1000:5000:1000), INSTANCES (10), SEQ (sequence slots per instance,
# 512; at most 4096, stepped in batches of at most 512), METHOD (ctc_prefix_beam_search), LEFT (num_decoding_left_chunks, -1), PERF_MS (10000),
# QDELAY_US (the sequence batcher's max_queue_delay_microseconds; the converter's 2000 when unset),
# PARAMS (more config.pbtxt parameters, KEY=VALUE ...: e.g. stream_threads=3; docs/benchmarks.md
# session 20 gives the configuration that keeps 5,000 streams),
# PROTOCOL (http|grpc), SECONDS_PER_STREAM (5: each sequence is the first 5 s of SPEECH.wav),
# MAX_SECONDS (the pool's longest stream, SECONDS_PER_STREAM + 1: --max-audio-seconds and
# --max-pass-seconds, which size every instance's caches),
# PEER (1; 0 skips WeNet's step), PEER_BATCHES (1,64,512), PEER_MODES (fp32,fp16), PEER_SECONDS
# (SECONDS_PER_STREAM), PEER_MIN_TIME (3), OUT_DIR, PORT, HARK, PYTHON.
set -euo pipefail
wav=${1:?a speech wav}; dev=${2:-cuda:0}
HARK=${HARK:-build/hark}; PY=${PYTHON:-/usr/bin/python3}
out=${OUT_DIR:-/tmp/hark-stream-bench}; port=${PORT:-18100}
levels=${LEVELS:-1000:5000:1000}; inst=${INSTANCES:-10}; seq=${SEQ:-512}
method=${METHOD:-ctc_prefix_beam_search}; left=${LEFT:--1}; proto=${PROTOCOL:-http}
rm -rf "$out" && mkdir -p "$out"
$PY bench/wenet_peer.py export --out "$out" >/dev/null
$PY tools/convert_wenet.py --checkpoint "$out/final.pt" --config "$out/train.yaml" \
    --units "$out/units.txt" --output "$out/repo/conformer" --streaming "$seq" >/dev/null
cfg="$out/repo/conformer/config.pbtxt"
sed -i "s/    count: 1/    count: $inst/" "$cfg"
if [ -n "${QDELAY_US:-}" ]; then
    sed -i "s/max_queue_delay_microseconds: [0-9]*/max_queue_delay_microseconds: $QDELAY_US/" "$cfg"
fi
for kv in precision=fp16 decoding_method=$method num_decoding_left_chunks=$left ${PARAMS:-}; do
    sed -i "/key: \"${kv%%=*}\"/d" "$cfg"
    echo "parameters { key: \"${kv%%=*}\" value { string_value: \"${kv#*=}\" } }" >> "$cfg"
done
secs=${SECONDS_PER_STREAM:-5} # each sequence: the first seconds of SPEECH.wav
$PY - "$wav" "$out/clip.wav" "$secs" <<'PYEOF'
import sys, wave
r = wave.open(sys.argv[1]); n = int(float(sys.argv[3]) * r.getframerate())
w = wave.open(sys.argv[2], "wb"); w.setnchannels(r.getnchannels()); w.setsampwidth(r.getsampwidth())
w.setframerate(r.getframerate()); w.writeframes(r.readframes(n)); w.close()
PYEOF
ulimit -n "$(ulimit -Hn)" || true
( exec "$HARK" serve --model-repository "$out/repo" --http-port "$port" --grpc-port $((port + 1)) \
    --metrics-port -1 --max-connections 100000 --max-audio-seconds "${MAX_SECONDS:-$((secs + 1))}" \
    --max-pass-seconds "${MAX_SECONDS:-$((secs + 1))}" \
    > "$out/serve.log" 2>&1 ) &
pid=$!
for _ in $(seq 600); do
    curl -s -o /dev/null -w '%{http_code}' "localhost:$port/v2/models/conformer/ready" |
        grep -q 200 && break
    if ! kill -0 $pid 2>/dev/null || grep -q "models) in the repository processed\|startup:" \
        "$out/serve.log"; then # loaded, yet not ready: the reason is in the log
        curl -s -o /dev/null -w '%{http_code}' "localhost:$port/v2/models/conformer/ready" |
            grep -q 200 && break
        cat "$out/serve.log"; kill $pid 2>/dev/null; exit 1
    fi
    sleep 0.5
done
addr=localhost:$port; [ "$proto" = grpc ] && addr=localhost:$((port + 1))
"$HARK" perf --streaming -m conformer -u "$addr" -i "$proto" --concurrency-range "$levels" \
    -p "${PERF_MS:-10000}" --input-data "$out/clip.wav" -f "$out/streams.csv" || status=$?
curl -s "localhost:$port/v2/models/conformer/stats" > "$out/stats.json" || true
kill -TERM $pid; wait $pid || true
tail -5 "$out/serve.log"
if [ "${PEER:-1}" = 1 ] && [ "${dev%%:*}" = cuda ]; then
    $PY bench/wenet_peer.py chunk --device "$dev" --modes "${PEER_MODES:-fp32,fp16}" \
        --seconds "${PEER_SECONDS:-$secs}" --left-chunks "$left" \
        --batched "${PEER_BATCHES:-1,64,512}" --min-time "${PEER_MIN_TIME:-3}" 2>/dev/null |
        grep '^{' | tee "$out/peer.jsonl" || status=${status:-$?}
fi
exit ${status:-0}
