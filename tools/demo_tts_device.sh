#!/usr/bin/env bash
# Trains hark's demo voice on the GPU machine in one call (docs/demo-voice.md): unpacks the
# carried espeak-ng, synthesises the data (tools/demo_tts_data.py), trains the aligner and the
# FastSpeech (tools/train_demo_tts.py) until the budget is nearly spent, and leaves in $OUT what
# comes back: resume.pt in parts of 15 MiB (r.part-*) and meta.tar (log.jsonl, stats.json,
# durations.pt, aligner.pt). Here, afterwards:
#   cat r.part-* > EXP/resume.pt && tar xf meta.tar -C EXP && tools/train_demo_tts.py export --exp EXP
#
# Usage (repository root there): tools/demo_tts_device.sh CARRY [BUDGET_S]
#   CARRY     the carried folder: engines.tar.xz (tools/demo_tts_device.sh --pack CARRY makes
#             it here from .demo/), and for a later call on a fresh machine init.pt (a
#             fastspeech.pt from `export`) and durations.pt
#   BUDGET_S  wall seconds of the whole call (default 540: the device's 10-minute commands, with
#             room for the start and the transfers)
# Environment: HOURS (train hours to synthesise, default 8), TOTAL_MIN (the learning-rate
# schedule's minutes of FastSpeech training over all calls; default this call's), TRAIN_ARGS
# (more options for train_demo_tts.py train, e.g. "--size tiny --max-steps 3"), WORK (the
# machine's work folder, default /root/demovoice: it survives between calls while the machine is
# warm, so a second call reuses the data and resumes from WORK/exp/resume.pt).
#
# tools/demo_tts_device.sh --pack CARRY   (here) packs .demo/'s espeak-ng part (flite's voices
# are not needed) with the transcripts into CARRY/engines.tar.xz.
set -euo pipefail
if [ "${1:-}" = "--pack" ]; then
    C=${2:?usage: $0 --pack CARRY}
    [ -x .demo/root/usr/bin/espeak-ng ] || { echo "run tools/demo_engines.sh .demo first" >&2; exit 1; }
    mkdir -p "$C"
    tar cJf "$C/engines.tar.xz" --exclude='.demo/root/usr/bin/flite' \
        --exclude='.demo/root/usr/lib/x86_64-linux-gnu/libflite*' .demo
    du -sh "$C"/*
    exit 0
fi
T0=$(date +%s)
C=${1:?usage: $0 CARRY [BUDGET_S]}
BUDGET=${2:-540}
W=${WORK:-/root/demovoice}
OUT=${OUT:-$W/out}
HOURS=${HOURS:-8}
export PYTHONUNBUFFERED=1
mkdir -p "$W/exp" "$OUT"
[ -x .demo/root/usr/bin/espeak-ng ] || tar xJf "$C/engines.tar.xz"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'

# a fresh machine continuing an earlier run: the carried weights and durations
INIT=()
if [ ! -f "$W/exp/resume.pt" ] && [ -f "$C/init.pt" ]; then
    INIT=(--init "$C/init.pt")
    [ -f "$C/durations.pt" ] && cp "$C/durations.pt" "$W/exp/"
fi

if [ ! -f "$W/data/stats.json" ]; then
    python3 tools/demo_tts_data.py --out "$W/data" --jobs "$(nproc)" --hours "$HOURS" \
        --engines-env .demo/env.sh
fi
rm -rf "$W/data/wav"   # the WAVs are in train.pt / test.pt now
LEFT=$((BUDGET - ($(date +%s) - T0) - 40))   # 40 s: the save, export and split after training
MIN=$(awk -v s="$LEFT" 'BEGIN { printf "%.2f", s / 60 }')
TOT=()
[ -n "${TOTAL_MIN:-}" ] && TOT=(--total-minutes "$TOTAL_MIN")
# shellcheck disable=SC2086
python3 tools/train_demo_tts.py train --data "$W/data" --exp "$W/exp" --minutes "$MIN" \
    --resume "${INIT[@]}" "${TOT[@]}" ${TRAIN_ARGS:-}

cp "$W/data/stats.json" "$W/exp/"
(cd "$W/exp" && split -b 15M resume.pt "$OUT/r.part-" &&
     tar cf "$OUT/meta.tar" log.jsonl stats.json durations.pt $( [ -f aligner.pt ] && echo aligner.pt))
ls -la "$OUT"
echo "call took $(( $(date +%s) - T0 )) s"
