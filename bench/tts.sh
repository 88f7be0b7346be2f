#!/usr/bin/env bash
# TTS benchmark (issue 19 §6): full-size FastSpeech (DLE's base.yaml) + HiFi-GAN V1 with generated
# weights, text -> audio on the GPU — hark (`hark bench --model FS --vocoder V1`) next to the
# original PyTorch code (bench/tts_peer.py: DLE's FastSpeech + jik876's Generator, eager FP16 and
# torch.compile) with the same weights (the peer exports them as the toolkits save checkpoints,
# hark's converters convert them), the same sentences (DLE's three golden sentences, each batch
# filled with them in turn), the same GPU, the same run.
# Usage: bench/tts.sh [BATCHES]   (default 1,32)
# Needs DLE's CUDA-Optimized/FastSpeech folder in .ext/fastspeech-dle and a hifi-gan checkout in
# .ext/hifi-gan (fetched, never committed). HARK, PYTHON, OUT_DIR, PEER_MODES (fp16,compile),
# HARK_MODES (fp16 fp32), PEER_MIN_TIME (1); VOCODER_CKPT + VOCODER_CONFIG time another generator on
# both sides instead of the generated V1 (e.g. the real V3: ../shared/data/golden/tts/hifigan_v3_real/
# generator_v3_ljspeech_wn_removed_fp16.pt with .ext/hifi-gan/config_v3.json).
set -euo pipefail
batches=${1:-1,32}
HARK=${HARK:-build/hark}; PY=${PYTHON:-python3}; out=${OUT_DIR:-/tmp/hark-tts-bench}
dle=${DLE_FASTSPEECH:-.ext/fastspeech-dle}; hg=${HIFIGAN_SRC:-.ext/hifi-gan}
mkdir -p "$out"
$PY bench/tts_peer.py export --dle "$dle" --hifigan "$hg" --out "$out" 2>/dev/null
rm -rf "$out/repo"
$PY tools/convert_fastspeech.py --checkpoint "$out/fastspeech.pt" \
    --config "$dle/fastspeech/hparams/base.yaml" --output "$out/repo/fastspeech" \
    --vocoder hifigan >/dev/null
$PY tools/convert_hifigan.py --checkpoint "${VOCODER_CKPT:-$out/g_v1}" \
    --config "${VOCODER_CONFIG:-$hg/config_v1.json}" --output "$out/repo/hifigan" >/dev/null
peer_voc=()
[ -n "${VOCODER_CKPT:-}" ] && peer_voc=(--vocoder-ckpt "$VOCODER_CKPT" --vocoder-config "$VOCODER_CONFIG")
# hark's symbol ids of the sentences (the same as DLE's text_to_sequence: tests/text)
sentences=("Printing, in the only sense with which we are at present concerned, differs from most if not from all the arts."
           "Dr. Smith paid \$12.50 for 3 books on Jan. 2nd, 1999 — at 4:30 p.m.!"
           "Turn left on {HH AW1 S T AH0 N} Street, said Mrs. Müller; OK?")
for i in 0 1 2; do
    rm -rf "$out/ids$i" && mkdir -p "$out/ids$i"
    "$HARK" speak --model "$out/repo/fastspeech" --vocoder "$out/repo/hifigan" --device cuda \
        --dump-dir "$out/ids$i" -o "$out/ids$i/out.wav" "${sentences[$i]}" >/dev/null
done
$PY - "$out" <<'PYEOF'
import json, sys
import numpy as np
out = sys.argv[1]
ids = [np.load(f"{out}/ids{i}/ids.npy").reshape(-1).astype(int).tolist() for i in range(3)]
json.dump(ids, open(f"{out}/ids.json", "w"))
PYEOF
: > "$out/hark.jsonl"
for p in ${HARK_MODES:-fp16 fp32}; do
    "$HARK" bench --model "$out/repo/fastspeech" --vocoder "$out/repo/hifigan" --device cuda \
        --precision $p --batch "$batches" | tee -a "$out/hark.jsonl"
done
$PY bench/tts_peer.py time --dle "$dle" --hifigan "$hg" --out "$out" --ids "$out/ids.json" \
    --batches "$batches" --modes "${PEER_MODES:-fp16,compile}" \
    --min-time "${PEER_MIN_TIME:-1}" "${peer_voc[@]}" 2>/dev/null | grep '^{' | tee "$out/peer.jsonl"
$PY - "$out" <<'PYEOF'
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for f in ("hark.jsonl", "peer.jsonl") for l in open(f"{out}/{f}")
        if l.startswith("{")]
hark = {(r.get("precision", r.get("mode")), r["batch"]): r for r in rows if r.get("impl") != "pytorch"}
peer = {(r["mode"], r["batch"]): r for r in rows if r.get("impl") == "pytorch" and "ms" in r}
for (p, b), h in sorted(hark.items()):
    for m in ("fp16", "compile"):
        if (m, b) in peer and p == "fp16":
            print(f"hark {p} / pytorch {m} at batch {b}: {peer[(m, b)]['ms'] / h['ms']:.2f}x "
                  f"({h['ms']:.2f} vs {peer[(m, b)]['ms']:.2f} ms; GPU memory "
                  f"{h.get('gpu_used_mb', '?')} (device) vs {peer[(m, b)]['peak_mem_mb']} MB (peak allocated))")
PYEOF
