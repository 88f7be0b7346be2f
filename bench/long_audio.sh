#!/usr/bin/env bash
# Long-form transcription end to end (issue 21): MINUTES of real speech — the shared utterances
# tiled with 0.3-2 s silences between them — transcribed by `hark transcribe --vad` (Silero VAD
# segments, batched) with the full-size LibriSpeech U2++ Conformer of generated weights
# (bench/wenet_peer.py export; needs WeNet's package in .ext/) or MODEL_DIR. Prints wall time,
# RTFx, peak host RSS and (on a GPU) peak GPU memory, polled from nvidia-smi.
# Usage: bench/long_audio.sh MINUTES [cuda:0|cpu] [fp16|fp32] — VAD_DIR (a converted Silero
# VAD; default: converted from ../shared/data/models/silero-vad), WAVS (folder of 16 kHz speech,
# default ../shared/data/audio/en/wav), MODEL_DIR, METHOD (ctc_greedy_search), BATCH (64),
# HARK, PYTHON, OUT_DIR.
set -euo pipefail
minutes=${1:?minutes of audio}; dev=${2:-cuda:0}; prec=${3:-fp16}
HARK=${HARK:-build/hark}; PY=${PYTHON:-/usr/bin/python3}; out=${OUT_DIR:-/tmp/hark-long-audio}
wavs=${WAVS:-../shared/data/audio/en/wav}
mkdir -p "$out"
if [ -z "${MODEL_DIR:-}" ]; then
    $PY bench/wenet_peer.py export --out "$out" >/dev/null
    $PY tools/convert_wenet.py --checkpoint "$out/final.pt" --config "$out/train.yaml" \
        --units "$out/units.txt" --output "$out/model" >/dev/null
    MODEL_DIR=$out/model
fi
if [ -z "${VAD_DIR:-}" ]; then
    $PY tools/convert_silero_vad.py --onnx ../shared/data/models/silero-vad/silero_vad.onnx \
        --output "$out/vad" >/dev/null
    VAD_DIR=$out/vad
fi
$PY - "$wavs" "$minutes" "$out/long.wav" <<'PYEOF'
import glob, random, sys, wave
import numpy as np
src, minutes, dst = sys.argv[1], float(sys.argv[2]), sys.argv[3]
clips = []
for p in sorted(glob.glob(src + "/*.wav")):
    w = wave.open(p)
    if w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2:
        clips.append(np.frombuffer(w.readframes(w.getnframes()), "<i2"))
rng, n, parts = random.Random(7), int(minutes * 60 * 16000), []
total = 0
while total < n:
    c = clips[rng.randrange(len(clips))]
    gap = np.zeros(int(rng.uniform(0.3, 2.0) * 16000), "<i2")
    parts += [c, gap]
    total += len(c) + len(gap)
x = np.concatenate(parts)[:n]
w = wave.open(dst, "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
w.writeframes(x.tobytes()); w.close()
print(f"{dst}: {n / 16000 / 60:.1f} min from {len(clips)} clips", file=sys.stderr)
PYEOF
gpu_peak=-1
if [ "${dev%%:*}" = cuda ] && command -v nvidia-smi >/dev/null; then
    (while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${dev#cuda:}"
                 sleep 0.2; done > "$out/gpu_mem.txt") &
    poll=$!
fi
$PY - "$HARK" "$out" "$minutes" transcribe --model "$MODEL_DIR" --device "$dev" \
    --precision "$prec" --vad "$VAD_DIR" --batch-size "${BATCH:-64}" \
    --decoding-method "${METHOD:-ctc_greedy_search}" "$out/long.wav" <<'PYEOF'
import resource, subprocess, sys, time
hark, out, minutes, args = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
t0 = time.time()
p = subprocess.run([hark] + args, stdout=open(out + "/text.txt", "w"), stderr=subprocess.PIPE,
                   text=True)
wall = time.time() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
if p.returncode:
    print(p.stderr[-2000:]); sys.exit(p.returncode)
words = len(open(out + "/text.txt").read().split())
print(f"audio {minutes:.1f} min: wall {wall:.1f} s, RTFx {minutes * 60 / wall:.1f}, "
      f"peak RSS {rss:.0f} MB, {words} words")
PYEOF
if [ -n "${poll:-}" ]; then
    kill $poll; gpu_peak=$(sort -n "$out/gpu_mem.txt" | tail -1)
    echo "peak GPU memory used (nvidia-smi, whole device): $gpu_peak MiB"
fi
