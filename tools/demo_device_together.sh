#!/usr/bin/env bash
# One GPU-machine call that trains the demo voice (two sizes) and the demo recogniser at once.
# Each trainer alone leaves the H200 mostly idle (their steps are bound by Python and kernel
# launches: docs/demo-data.md, docs/demo-voice.md), so one call runs them side by side:
#   voice A   tools/demo_tts_device.sh, size demo (it synthesises the voice's data, trains the
#             aligner and writes the durations);
#   voice B   the same data and durations, size demo-l, started once A's durations exist;
#   recogniser tools/demo_asr_device.sh (niced), started once the voice's data exists.
# A later call on the same (warm) machine goes on with all three. Each keeps its own state on the
# machine (/root/va, /root/vb, /root/demoasr); what comes back fits the device's 8 files:
#   $OUT/va.log vb.log asr.log    each trainer's output
#   $OUT/back.tar                  each voice's log.jsonl, fastspeech.yaml, stats and durations,
#                                  the recogniser's history.json
#   $OUT/va.pt, vb.pt              (FINAL=1) each voice's export in float16 (DLE layout) without
#                                  its sinusoid tables (`train_demo_tts.py half`: under 16 MiB;
#                                  `fill` restores them)
#   $OUT/demo-en-asr.tar, eval.tar (ASR_EVAL=1) the recogniser converted and scored
#
# Usage (repository root there): tools/demo_device_together.sh CARRY [BUDGET_S]
#   CARRY is tools/demo_asr_device.sh --pack's folder or its train/ part (its engines hold
#   espeak-ng too; the whole folder and the repository are now over the 64 MiB a call carries).
# Environment: VOICE_MIN and ASR_MIN (each run's schedule in minutes over all calls: required on
# the first call), HOURS (voice data, default 17: every train sentence), VA=0 / VB=0 (no voice A / B: A's
# data and durations must then be there from an earlier call), ASR=0
# (no recogniser), VOICE_ARGS / ASR_ARGS (more train_demo_tts.py / train_demo.py options),
# ASR_EVAL=1, FINAL=1.
set -uo pipefail
T0=$(date +%s)
C=$(cd "${1:?usage: $0 CARRY [BUDGET_S]}" && pwd)
BUDGET=${2:-560}
R=$OUT
mkdir -p /root/va/exp /root/vb/exp "$R"
left() { echo $((BUDGET - ($(date +%s) - T0))); }
[ -x .demo/root/usr/bin/espeak-ng ] || tar xJf "$C/engines.tar.xz"

if [ "${VA:-1}" = 1 ]; then
    WORK=/root/va OUT=/root/va/out TOTAL_MIN=${VOICE_MIN:-} HOURS=${HOURS:-17} \
        TRAIN_ARGS="--size demo ${VOICE_ARGS:-}" bash tools/demo_tts_device.sh "$C" "$BUDGET" > "$R/va.log" 2>&1 &
fi

if [ "${VB:-1}" = 1 ]; then
    (
        until [ -f /root/va/exp/durations.pt ] || [ "$(left)" -lt 120 ]; do sleep 2; done
        [ -f /root/va/exp/durations.pt ] || exit 0
        ln -sfn /root/va/data /root/vb/data
        [ -f /root/vb/exp/durations.pt ] || cp /root/va/exp/durations.pt /root/vb/exp/
        WORK=/root/vb OUT=/root/vb/out TOTAL_MIN=${VOICE_MIN:-} TRAIN_ARGS="--size demo-l ${VOICE_ARGS:-}" \
            bash tools/demo_tts_device.sh "$C" "$(left)"
    ) > "$R/vb.log" 2>&1 &
fi

if [ "${ASR:-1}" = 1 ]; then
    (
        until [ -f /root/va/data/stats.json ] || [ "$(left)" -lt 200 ]; do sleep 2; done
        WORK=/root/demoasr OUT=/root/demoasr/out TOTAL_MIN=${ASR_MIN:-} EVAL=${ASR_EVAL:-0} \
            TRAIN_ARGS="${ASR_ARGS:-}" nice -n 5 bash tools/demo_asr_device.sh "$C" "$(left)"
    ) > "$R/asr.log" 2>&1 &
fi
wait

for v in va vb; do
    [ -f /root/$v/exp/log.jsonl ] || continue
    mkdir -p /root/back/$v
    cp /root/$v/exp/log.jsonl /root/$v/exp/fastspeech.yaml /root/$v/exp/stats.json /root/back/$v/ 2>/dev/null
    if [ "${FINAL:-0}" = 1 ] && [ -f /root/$v/exp/fastspeech.pt ]; then
        python3 tools/train_demo_tts.py half --exp /root/$v/exp --out "$R/$v.pt"
    fi
done
cp /root/va/exp/durations.pt /root/back/ 2>/dev/null
cp /root/demoasr/out/history.json /root/back/asr-history.json 2>/dev/null
[ -d /root/back ] && tar cf "$R/back.tar" -C /root/back .
for f in demo-en-asr.tar eval.tar; do
    [ -f /root/demoasr/out/$f ] && cp /root/demoasr/out/$f "$R/"
done
ls -la "$R"
echo "call took $(( $(date +%s) - T0 )) s"
