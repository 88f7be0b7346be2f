#!/usr/bin/env bash
# Server benchmark (issue 4), on one machine in one run: the full-size Conformer (bench/wenet_peer.py's
# generated weights, converted with tools/convert_wenet.py) served by `hark serve`, measured with
# `hark perf`: (1) server overhead at concurrency 1 for a 5 s request sent as binary data
# (client latency minus the server's own queue + compute); (2) throughput at concurrency 64 with
# dynamic batching, as a fraction of the engine's raw batched throughput (`hark bench --pipeline`,
# the same PCM -> text work at batch 64).
# Usage: bench/serve_bench.sh SPEECH.wav [cuda:0|cpu] [fp16|fp32]
set -euo pipefail
wav=${1:?a speech wav}; dev=${2:-cuda:0}; prec=${3:-fp16}
HARK=${HARK:-build/hark}; PY=${PYTHON:-python3}
out=${OUT_DIR:-/tmp/hark-serve-bench}; port=${PORT:-18000}
rm -rf "$out" && mkdir -p "$out"
$PY bench/wenet_peer.py export --out "$out" >/dev/null
$PY tools/convert_wenet.py --checkpoint "$out/final.pt" --config "$out/train.yaml" \
    --units "$out/units.txt" --output "$out/repo/conformer" >/dev/null
[ "$prec" = fp16 ] && echo 'parameters { key: "precision" value { string_value: "fp16" } }' \
    >> "$out/repo/conformer/config.pbtxt"
[ "$dev" = cpu ] && sed -i 's/KIND_GPU/KIND_CPU/' "$out/repo/conformer/config.pbtxt"
$PY - "$wav" "$out/5s.wav" <<'PYEOF'
import sys, wave
r = wave.open(sys.argv[1]); n = 5 * r.getframerate()
w = wave.open(sys.argv[2], "wb"); w.setnchannels(r.getnchannels()); w.setsampwidth(r.getsampwidth())
w.setframerate(r.getframerate()); w.writeframes(r.readframes(n)); w.close()
PYEOF
"$HARK" bench --model "$out/repo/conformer" --pipeline --wav "$out/5s.wav" --seconds 5 \
    --batch 1,64 --device "$dev" --precision "$prec" | tee "$out/engine.jsonl"
"$HARK" serve --model-repository "$out/repo" --http-port "$port" --metrics-port -1 \
    --max-audio-seconds 30 > "$out/serve.log" 2>&1 &
pid=$!
for i in $(seq 1 300); do
    curl -s -o /dev/null -w '%{http_code}' "localhost:$port/v2/health/ready" | grep -q 200 && break
    sleep 0.2
done
common=(-m conformer -u "localhost:$port" -p 3000 --input-data "$out/5s.wav"
        --decoding-method ctc_greedy_search --max-seconds 120)
"$HARK" perf "${common[@]}" --concurrency-range 1:1:1 -f "$out/c1.csv" | tail -3
"$HARK" perf "${common[@]}" --concurrency-range 64:64:1 -f "$out/c64.csv" | tail -3
kill -TERM $pid; wait $pid || true
# the same concurrency-1 request with no batching delay (max_queue_delay_microseconds: 0)
sed -i 's/max_queue_delay_microseconds: [0-9]*/max_queue_delay_microseconds: 0/' "$out/repo/conformer/config.pbtxt"
"$HARK" serve --model-repository "$out/repo" --http-port "$port" --metrics-port -1 \
    --max-audio-seconds 30 > "$out/serve0.log" 2>&1 &
pid=$!
for i in $(seq 1 300); do
    curl -s -o /dev/null -w '%{http_code}' "localhost:$port/v2/health/ready" | grep -q 200 && break
    sleep 0.2
done
"$HARK" perf "${common[@]}" --concurrency-range 1:1:1 -f "$out/c1_nodelay.csv" | tail -1
kill -TERM $pid; wait $pid || true
$PY - "$out" <<'PYEOF'
import csv, json, sys
out = sys.argv[1]
eng = {r["batch"]: r for r in map(json.loads, open(out + "/engine.jsonl"))}
c64 = next(csv.DictReader(open(out + "/c64.csv")))
for name in ("c1", "c1_nodelay"):
    c1 = next(csv.DictReader(open(f"{out}/{name}.csv")))
    server = sum(float(c1[k]) for k in ("server_queue_us", "server_compute_input_us", "server_compute_infer_us", "server_compute_output_us"))
    lat = float(c1["latency_avg_us"])
    print(f"{name}: client latency {lat/1000:.3f} ms (p50 {float(c1['latency_p50_us'])/1000:.3f}), server queue+compute "
          f"{server/1000:.3f} ms, overhead {(lat-server)/1000:.3f} ms (queue {float(c1['server_queue_us'])/1000:.3f} ms)")
print(f"engine alone, batch 1: {eng[1]['ms']:.3f} ms per 5 s request")
t = float(c64["throughput_infer_per_sec"])
print(f"concurrency 64: {t:.1f} requests/s ({float(c64['throughput_audio_sec_per_sec']):.0f} audio s/s); "
      f"engine batch 64: {eng[64]['utt_per_sec']:.1f} utt/s -> {100*t/eng[64]['utt_per_sec']:.1f}% of raw batched throughput")
PYEOF
