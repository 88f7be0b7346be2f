#!/usr/bin/env bash
# Jasper / QuartzNet benchmark on a GPU: hark (`hark bench --synthetic`) next to DLE's own PyTorch
# model (bench/jasper_peer.py) with the same generated weights, the same work (random 64-mel
# features of 2, 7 and 16.7 s -> encoder -> CTC log-softmax -> argmax -> ids on the host), the
# same machine, the same run.
# Usage: bench/jasper.sh DLE_ROOT [MODELS] [BATCHES] [SECONDS]
#   DLE_ROOT: a checkout of github.com/NVIDIA/DeepLearningExamples (never committed to hark)
#   MODELS: jasper10x5dr,quartznet15x5 (default both); BATCHES 1,8,64; SECONDS 2,7,16.7
# hark runs fp16 (and fp32 with HARK_FP32=1); PyTorch eager fp32, fp16 (autocast) and
# torch.compile fp16 (PEER_MODES to change).
set -euo pipefail
dle=${1:?usage: bench/jasper.sh DLE_ROOT [MODELS] [BATCHES] [SECONDS]}
models=${2:-jasper10x5dr,quartznet15x5}
batches=${3:-1,8,64}
seconds=${4:-2,7,16.7}
PY=${PYTHON:-python3}
HARK=${HARK:-build/hark}
out=${OUT_DIR:-/tmp/hark-jasper-bench}
mkdir -p "$out"
: > "$out/hark.jsonl"
: > "$out/peer.jsonl"
for m in ${models//,/ }; do
    for p in fp16 ${HARK_FP32:+fp32}; do
        "$HARK" bench --synthetic "$m" --precision $p --batch "$batches" --seconds "$seconds" \
            --device cuda:0 | tee -a "$out/hark.jsonl"
    done
    $PY bench/jasper_peer.py time --dle "$dle" --model "$m" --modes "${PEER_MODES:-fp32,fp16,compile}" \
        --batches "$batches" --seconds "$seconds" --min-time "${PEER_MIN_TIME:-2}" 2>/dev/null |
        grep '^{' | tee -a "$out/peer.jsonl"
done
$PY - "$out/hark.jsonl" "$out/peer.jsonl" <<'PYEOF'
import json, sys
h = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and "ms" in l]
p = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{") and "ms" in l]
print(f"{'impl':8} {'model':14} {'mode':8} {'sec':>5} {'batch':>5} {'ms/batch':>10} {'RTFx':>9} {'peak':>7}")
for r in h + p:
    mode = r.get("precision") or r.get("mode")
    frac = f"{r['fraction_of_peak']:.3f}" if "fraction_of_peak" in r else ""
    print(f"{r['impl']:8} {r['model']:14} {mode:8} {r['seconds']:5.1f} {r['batch']:5d} "
          f"{r['ms']:10.2f} {r['rtfx']:9.1f} {frac:>7}")
for r in h:
    for q in p:
        if (q["model"], q["seconds"], q["batch"]) == (r["model"], r["seconds"], r["batch"]):
            print(f"{r['model']} {r['seconds']} s batch {r['batch']}: hark {r['precision']} is "
                  f"{q['ms'] / r['ms']:.2f}x PyTorch {q['mode']}")
PYEOF
