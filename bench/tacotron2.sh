#!/usr/bin/env bash
# Tacotron 2 + WaveGlow benchmark (issue 20 §5): full-size Tacotron 2 (DLE's default
# hyperparameters) + WaveGlow with 256 WN channels (DLE's defaults otherwise: 12 flows, 8 layers),
# generated weights, text -> audio on the GPU — hark (`hark bench --model T2 --vocoder WG`) next to
# NVIDIA DeepLearningExamples' own PyTorch code (bench/tacotron2_peer.py: DLE's Tacotron2.infer +
# WaveGlow.infer + Denoiser as its test_infer.py runs them, FP32, FP16 and torch.compile) with
# the same weights (the peer exports them as DLE's train.py saves checkpoints, hark's converters
# convert them), the same decoder steps (STEPS, the gate never fires: see the peer's docstring),
# the same input (bench/tacotron2_input.txt: the seed's 128-character phrase, each batch filled
# with it), the same GPU, the same run.
# Usage: bench/tacotron2.sh [BATCHES]   (default 1,8,32)
# Needs DLE's PyTorch/SpeechSynthesis/Tacotron2 folder in .ext/tacotron2-dle (fetched, never
# committed; numpy and scipy in PYTHON). HARK, PYTHON, OUT_DIR, DLE_TACOTRON2, STEPS (600),
# PEER_MODES (fp32,fp16,compile; also jit-fp32, jit-fp16, compile-cg; empty: none), HARK_MODES
# (fp16 fp32; empty: none), PEER_MIN_TIME (1), PEER_MIN_RUNS (5),
# PEER_DEVICE (cuda; cpu for a smoke test with a small STEPS). SKIP_EXPORT=1 reuses OUT_DIR's
# checkpoints and conversions and appends to its results (to split a run over several calls);
# the ratios are printed from all of OUT_DIR's results, the latest row per mode and batch.
set -euo pipefail
batches=${1:-1,8,32}
HARK=${HARK:-build/hark}; PY=${PYTHON:-python3}; out=${OUT_DIR:-/tmp/hark-tacotron2-bench}
dle=${DLE_TACOTRON2:-.ext/tacotron2-dle}; steps=${STEPS:-600}
text=bench/tacotron2_input.txt
maxb=$(tr , '\n' <<<"$batches" | sort -n | tail -1)
mkdir -p "$out"
if [ -z "${SKIP_EXPORT:-}" ]; then
    $PY bench/tacotron2_peer.py export --dle "$dle" --out "$out" --steps "$steps"
    rm -rf "$out/repo"
    $PY tools/convert_tacotron2.py --checkpoint "$out/checkpoint_Tacotron2_0.pt" \
        --output "$out/repo/tacotron2" --vocoder waveglow --max-batch-size "$maxb" >/dev/null
    $PY tools/convert_waveglow.py --checkpoint "$out/checkpoint_WaveGlow_0.pt" \
        --output "$out/repo/waveglow" --max-batch-size "$maxb" >/dev/null
    : > "$out/hark.jsonl"
    : > "$out/peer.jsonl"
fi
for p in ${HARK_MODES-fp16 fp32}; do
    "$HARK" bench --model "$out/repo/tacotron2" --vocoder "$out/repo/waveglow" --device cuda \
        --precision $p --batch "$batches" --text-file "$text" | tee -a "$out/hark.jsonl"
done
if [ -n "${PEER_MODES-fp32,fp16,compile}" ]; then
    $PY bench/tacotron2_peer.py time --dle "$dle" --out "$out" --text-file "$text" \
        --batches "$batches" --modes "${PEER_MODES-fp32,fp16,compile}" \
        --min-time "${PEER_MIN_TIME:-1}" --min-runs "${PEER_MIN_RUNS:-5}" \
        --device "${PEER_DEVICE:-cuda}" | { grep '^{' || true; } | tee -a "$out/peer.jsonl"
fi
$PY - "$out" <<'PYEOF'
import json, os, sys
out = sys.argv[1]
rows = [json.loads(l) for f in ("hark.jsonl", "peer.jsonl") if os.path.exists(f"{out}/{f}")
        for l in open(f"{out}/{f}") if l.startswith("{")]
hark = {(r.get("precision"), r["batch"]): r for r in rows if r.get("impl") != "pytorch" and "ms" in r}
peer = {(r["mode"], r["batch"]): r for r in rows if r.get("impl") == "pytorch" and "ms" in r}
for (p, b), h in sorted(hark.items()):
    for m in ("fp16", "fp32", "jit-fp16", "jit-fp32", "compile", "compile-cg"):
        if (m, b) not in peer or (p == "fp32" and m != "fp32"):
            continue
        q = peer[(m, b)]
        note = "" if q["samples"] == h.get("samples") else \
            f" [samples differ: hark {h.get('samples')} vs pytorch {q['samples']}]"
        if b == 1:
            what = f"latency {q['ms'] / h['ms']:.2f}x ({h['ms']:.1f} vs {q['ms']:.1f} ms)"
        else:
            what = (f"throughput {h['samples_per_s'] / q['samples_per_s']:.2f}x "
                    f"({h['samples_per_s']:.0f} vs {q['samples_per_s']:.0f} samples/s)")
        print(f"hark {p} / pytorch {m} at batch {b}: {what}; RTF {h.get('rtf')} vs {q['rtf']}; "
              f"GPU memory {h.get('gpu_used_mb', '?')} (device) vs {q['peak_mem_mb']} MB "
              f"(peak allocated){note}")
PYEOF
