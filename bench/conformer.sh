#!/usr/bin/env bash
# Conformer benchmark: hark (`hark bench`) next to WeNet's own PyTorch model (bench/wenet_peer.py)
# with the same generated weights (full LibriSpeech U2++ size), same work (10 s of features ->
# encoder -> CTC log-softmax -> argmax), same machine, same run.
# Usage: bench/conformer.sh cpu [BATCHES]        (both cores; PyTorch fp32 with 2 threads)
#        bench/conformer.sh cuda [BATCHES]       (hark fp32, fp16, bf16; PyTorch eager fp32, fp16,
#                                                 bf16, compile fp16 and bf16)
# On the GPU hark runs once per path of GPU_PATHS (default "auto sm80": the device's own path —
# Hopper on an H100 — then the Ampere path forced with HARK_GPU_ARCH=sm80, issue 24); each row
# carries its gpu_path and peak GPU memory. GPU_PATHS=auto runs the device's path alone.
# Needs WeNet's `wenet` package in .ext/ and the import shims in .ext/shims (never committed;
# WENET_EXT names another folder); without them it says how to fill the folder and exits 2.
set -euo pipefail
ext=${WENET_EXT:-.ext}
if [ ! -f "$ext/wenet/__init__.py" ] || [ ! -d "$ext/shims" ]; then
    cat >&2 <<EOF
bench/conformer.sh: WeNet's sources are not in $ext/ (git-ignored, never committed). Fill it:
    git clone --depth 1 https://github.com/wenet-e2e/wenet $ext/wenet-src
    ln -sfn wenet-src/wenet $ext/wenet
    cp -r ../shared/tools/pytorch-peer/shims $ext/shims
and run with Debian's /usr/bin/python3 (python3-torch: tools/install-deps.sh --dev).
EOF
    exit 2
fi
dev=${1:-cpu}
batches=${2:-$([ "$dev" = cpu ] && echo 1,8 || echo 1,8,64,256)}
PY=${PYTHON:-python3}
[ "$dev" = cpu ] && [ -x /usr/bin/python3 ] && PY=${PYTHON:-/usr/bin/python3}
HARK=${HARK:-build/hark}
out=${OUT_DIR:-/tmp/hark-conformer-bench}
mkdir -p "$out"
$PY bench/wenet_peer.py export --wenet "$ext" --shims "$ext/shims" --out "$out" >/dev/null
$PY tools/convert_wenet.py --checkpoint "$out/final.pt" --config "$out/train.yaml" \
    --units "$out/units.txt" --output "$out/model" >/dev/null
if [ "$dev" = cpu ]; then
    threads=$(nproc)
    OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX} "$HARK" bench --model "$out/model" \
        --batch "$batches" --threads "$threads" | tee "$out/hark.jsonl"
    $PY bench/wenet_peer.py time --wenet "$ext" --shims "$ext/shims" --ckpt "$out/final.pt" --device cpu --modes fp32 \
        --batches "$batches" --threads "$threads" 2>/dev/null | grep '^{' | tee "$out/peer.jsonl"
else
    : > "$out/hark.jsonl"
    for arch in ${GPU_PATHS:-auto sm80}; do
        for p in ${HARK_MODES:-fp32 fp16 bf16}; do
            HARK_GPU_ARCH=$arch "$HARK" bench --model "$out/model" --batch "$batches" \
                --device cuda:0 --precision $p | tee -a "$out/hark.jsonl"
        done
    done
    $PY bench/wenet_peer.py time --wenet "$ext" --shims "$ext/shims" --ckpt "$out/final.pt" --device cuda --modes ${PEER_MODES:-fp32,fp16,bf16,compile,compile-bf16} \
        --batches "$batches" --min-time "${PEER_MIN_TIME:-2}" 2>/dev/null | grep '^{' |
        tee "$out/peer.jsonl"
fi
$PY - "$out/hark.jsonl" "$out/peer.jsonl" <<'PYEOF'
import json, sys
h = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
p = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{") and "ms" in l]
def name(r):  # hark's rows name their GPU path (hopper / ampere)
    return r["impl"] + ("/" + r["gpu_path"] if "gpu_path" in r else "")
print(f"{'impl':12} {'mode':8} {'batch':>5} {'ms/batch':>10} {'RTFx':>10} {'TFLOP/s':>8} {'mem MB':>8}")
for r in h + p:
    mem = r.get("peak_mem_mb") or r.get("peak_rss_mb") or ""
    tf = f"{r['tflops']:.2f}" if "tflops" in r else ""
    print(f"{name(r):12} {r['mode']:8} {r['batch']:5d} {r['ms']:10.2f} {r['rtfx']:10.1f} {tf:>8} {mem!s:>8}")
for r in h:
    peers = [q for q in p if q["batch"] == r["batch"]]
    for q in peers:
        print(f"{name(r)} {r['mode']} / pytorch {q['mode']} at batch {r['batch']}: {q['ms'] / r['ms']:.2f}x")
# the Ampere path against the Hopper path, same precision and batch (same run)
for r in h:
    if r.get("gpu_path") != "ampere":
        continue
    for q in h:
        if q.get("gpu_path") == "hopper" and q["mode"] == r["mode"] and q["batch"] == r["batch"]:
            print(f"hark ampere / hopper {r['mode']} at batch {r['batch']}: {r['ms'] / q['ms']:.2f}x "
                  f"the time, {r.get('peak_mem_mb', 0):.0f} / {q.get('peak_mem_mb', 0):.0f} MB")
PYEOF
