#!/usr/bin/env bash
# Server benchmark (issue 4), on one machine in one run: a Conformer served by `hark serve`, measured
# with `hark perf` (binary tensors, keep-alive), greedy CTC search, a 5 s request:
#  (1) overhead at concurrency 1 with no batching delay: client latency minus the server's own
#      queue + compute, next to the loopback floor (bench_loopback: the same body over TCP and a
#      64-byte answer, no HTTP, no inference);
#  (2) throughput at concurrency 64 with dynamic batching for each of CONFIGS (instances:preferred
#      sizes[:max_queue_delay_us, default 2000]; default "1:32,64 1:64:5000 2:32,64": the
#      converter's preferred sizes with 1 and 2 instances, and full batches only with 1, given
#      5 ms for the 64 requests to come back), as a fraction of the engine's raw
#      batched throughput (`hark bench --pipeline`: the same PCM -> text work at batch 64), with
#      the average batch size and the CPU the HTTP loops, the instances and `hark perf` used.
# Usage: bench/serve_bench.sh SPEECH.wav [cuda:0|cpu] [fp16|fp32]
# Model: MODEL=full (default on a GPU: the full-size LibriSpeech Conformer with generated weights,
# bench/wenet_peer.py, needs WeNet's package in .ext/) or MODEL=tiny (default on the CPU:
# bench/wenet_tiny.py, one small block, TINY_VOCAB units (64), so the CPU run shows the server).
# Other knobs: CONFIGS, CONCURRENCY=64, PERF_MS=3000, TRIALS=10, HTTP_THREADS (server default),
# PROTOCOL=http|grpc (what `hark perf` speaks: KServe v2 over HTTP/1.1, or gRPC on PORT + 1),
# PARAMS (more config.pbtxt parameters, "key=value ..."), OUT_DIR, PORT, HARK, PYTHON.
set -euo pipefail
wav=${1:?a speech wav}; dev=${2:-cuda:0}; prec=${3:-fp16}
HARK=${HARK:-build/hark}; PY=${PYTHON:-/usr/bin/python3}
out=${OUT_DIR:-/tmp/hark-serve-bench}; port=${PORT:-18000}
model=${MODEL:-$([ "$dev" = cpu ] && echo tiny || echo full)}
configs=${CONFIGS:-1:32,64 1:64:5000 2:32,64}; conc=${CONCURRENCY:-64}
proto=${PROTOCOL:-http}; gport=$((port + 1))
perf_ms=${PERF_MS:-3000}; trials=${TRIALS:-$([ "$dev" = cpu ] && echo 4 || echo 10)}
rm -rf "$out" && mkdir -p "$out"

# ---- the model and the 5 s request
if [ "$model" = full ]; then
    $PY bench/wenet_peer.py export --out "$out" >/dev/null
else
    $PY bench/wenet_tiny.py --out "$out" --vocab "${TINY_VOCAB:-64}" 2>/dev/null
fi
$PY tools/convert_wenet.py --checkpoint "$out/final.pt" --config "$out/train.yaml" \
    --units "$out/units.txt" --output "$out/repo/conformer" >/dev/null
cfg="$out/repo/conformer/config.pbtxt"
[ "$prec" = fp16 ] && echo 'parameters { key: "precision" value { string_value: "fp16" } }' >> "$cfg"
for kv in ${PARAMS:-}; do # more config.pbtxt parameters, e.g. PARAMS="gpu_turns=false"
    echo "parameters { key: \"${kv%%=*}\" value { string_value: \"${kv#*=}\" } }" >> "$cfg"
done
[ "$dev" = cpu ] && sed -i 's/KIND_GPU/KIND_CPU/' "$cfg"
cp "$cfg" "$out/config.base"
$PY - "$wav" "$out/5s.wav" <<'PYEOF'
import sys, wave
r = wave.open(sys.argv[1]); n = 5 * r.getframerate()
w = wave.open(sys.argv[2], "wb"); w.setnchannels(r.getnchannels()); w.setsampwidth(r.getsampwidth())
w.setframerate(r.getframerate()); w.writeframes(r.readframes(n)); w.close()
PYEOF

# ---- the engine alone, and the loopback floor for a body of this size
"$HARK" bench --model "$out/repo/conformer" --pipeline --wav "$out/5s.wav" --seconds 5 \
    --batch 1,32,64 --device "$dev" --precision "$prec" | tee "$out/engine.jsonl"
[ -x build/bench/bench_loopback ] || make -s build/bench/bench_loopback >/dev/null
build/bench/bench_loopback --bytes 320000 | tee "$out/loopback.json"

# ---- the server: one run per configuration
snap() { # PID FILE: per-thread CPU seconds (name, utime+stime), and the model's counters
    $PY - "$1" "$2" "localhost:$port" <<'PYEOF'
import json, os, sys, urllib.request
pid, f, addr = sys.argv[1:4]
th = {}
for t in os.listdir(f"/proc/{pid}/task"):
    try:
        comm = open(f"/proc/{pid}/task/{t}/comm").read().strip()
        st = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
        th[t] = [comm, (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")]
    except OSError:
        pass
m = json.load(urllib.request.urlopen(f"http://{addr}/v2/models/conformer/stats"))["model_stats"][0]
json.dump({"threads": th, "inference_count": int(m["inference_count"]),
           "execution_count": int(m["execution_count"])}, open(f, "w"))
PYEOF
}
run() { # NAME INSTANCES PREFERRED DELAY_US CONCURRENCY
    local name=$1 count=$2 pref=$3 delay=$4 c=$5 pid
    sed -e "s/count: [0-9]*/count: $count/" \
        -e "s/preferred_batch_size: \[[^]]*\]/preferred_batch_size: [ $pref ]/" \
        -e "s/max_queue_delay_microseconds: [0-9]*/max_queue_delay_microseconds: $delay/" \
        "$out/config.base" > "$cfg"
    local grpc_flag="" target="localhost:$port"
    [ "$proto" = grpc ] && grpc_flag="--grpc-port $gport" && target="localhost:$gport"
    ( exec "$HARK" serve --model-repository "$out/repo" --http-port "$port" --metrics-port -1 $grpc_flag \
        --max-audio-seconds 30 ${HTTP_THREADS:+--http-threads "$HTTP_THREADS"} \
        > "$out/serve_$name.log" 2>&1 ) &
    pid=$!
    for i in $(seq 1 600); do
        curl -s -o /dev/null -w '%{http_code}' "localhost:$port/v2/health/ready" | grep -q 200 && break
        kill -0 $pid 2>/dev/null || { cat "$out/serve_$name.log"; exit 1; }
        sleep 0.2
    done
    snap $pid "$out/${name}_before.json"
    local TIMEFORMAT='%R %U %S'
    { time "$HARK" perf -m conformer -u "$target" -i "$proto" -p "$perf_ms" -r "$trials" \
        --input-data "$out/5s.wav" --decoding-method ctc_greedy_search --max-seconds 180 \
        --concurrency-range "$c:$c:1" --max-threads "$((c > 64 ? c : 64))" \
        -f "$out/$name.csv" > "$out/perf_$name.log" 2>&1 ; } \
        2> "$out/${name}_time.txt"
    snap $pid "$out/${name}_after.json"
    kill -TERM $pid; wait $pid || true
    tail -2 "$out/perf_$name.log"
}
run c1 1 "32, 64" 0 1
names=""
for c in $configs; do
    IFS=: read -r n pref delay <<< "$c"
    name="c${conc}_x${n}_p${pref//,/_}_d${delay:=2000}"
    names="$names $name"
    run "$name" "$n" "${pref//,/, }" "$delay" "$conc"
done

# ---- summary
$PY - "$out" "$conc" "$names" <<'PYEOF'
import csv, json, sys
out, conc, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
eng = {r["batch"]: r for r in map(json.loads, open(out + "/engine.jsonl"))}
lb = json.load(open(out + "/loopback.json"))
def row(name):
    return next(csv.DictReader(open(f"{out}/{name}.csv")))
def usage(name):
    b, a = (json.load(open(f"{out}/{name}_{w}.json")) for w in ("before", "after"))
    n = a["inference_count"] - b["inference_count"]
    batches = a["execution_count"] - b["execution_count"]
    cpu = {}
    for t, (comm, s) in a["threads"].items():
        k = "instances" if comm.startswith("inst") else "HTTP loops" if comm.startswith(("http", "hark")) else "other"
        cpu[k] = cpu.get(k, 0) + s - b["threads"].get(t, [comm, 0])[1]
    wall, user, sys_ = map(float, open(f"{out}/{name}_time.txt").read().split()[-3:])
    return n, batches, cpu, (user + sys_) / wall
c1 = row("c1")
server = sum(float(c1[k]) for k in ("server_queue_us", "server_compute_input_us",
                                    "server_compute_infer_us", "server_compute_output_us"))
lat = float(c1["latency_avg_us"])
n, _, cpu, _ = usage("c1")
print(f"\nengine alone: batch 1 {eng[1]['ms']:.3f} ms; batch 64 {eng[64]['ms']:.3f} ms = "
      f"{eng[64]['utt_per_sec']:.0f} utt/s (batch 32: {eng[32]['utt_per_sec']:.0f} utt/s)")
print(f"concurrency 1 (no batching delay): client latency {lat/1000:.3f} ms (p50 "
      f"{float(c1['latency_p50_us'])/1000:.3f}), server queue+compute {server/1000:.3f} ms "
      f"(queue {float(c1['server_queue_us'])/1000:.3f})")
print(f"  OVERHEAD {(lat - server)/1000:.3f} ms per request (target <= 0.3); loopback floor for "
      f"the 320 KB body alone: {lb['rtt_avg_us']/1000:.3f} ms (p50 {lb['rtt_p50_us']/1000:.3f}); "
      f"HTTP loop CPU {cpu.get('HTTP loops', 0)/max(n, 1)*1e6:.0f} us per request")
for name in names:
    k, rest = name.split("_x")[1].split("_p", 1)
    pref, delay = rest.split("_d")
    r = row(name)
    n, batches, cpu, client = usage(name)
    t = float(r["throughput_infer_per_sec"])
    print(f"concurrency {conc}, {k} instance(s), preferred [{pref.replace('_', ', ')}], delay "
          f"{int(delay)/1000:g} ms: {t:.0f} requests/s "
          f"({float(r['throughput_audio_sec_per_sec']):.0f} audio s/s), latency avg "
          f"{float(r['latency_avg_us'])/1000:.2f} ms (p50 {float(r['latency_p50_us'])/1000:.2f}, p99 "
          f"{float(r['latency_p99_us'])/1000:.2f}), average batch {n/max(batches, 1):.1f}"
          f"{'' if r['stable'] == '1' else ' (unstable)'}")
    print(f"  = {100*t/eng[64]['utt_per_sec']:.1f}% OF THE ENGINE'S BATCH-64 THROUGHPUT (target >= 90); "
          f"CPU per request: HTTP loops {cpu.get('HTTP loops', 0)/max(n, 1)*1e6:.0f} us, "
          f"instances {cpu.get('instances', 0)/max(n, 1)*1e6:.0f} us; hark perf used {client:.1f} cores")
PYEOF
