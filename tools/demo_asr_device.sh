#!/usr/bin/env bash
# Trains hark's demo recogniser on the GPU machine (docs/demo-data.md), one 10-minute device call
# at a time: unpacks the carried engines and WeNet, synthesises the corpus when the machine has
# none (tools/demo_data.py: about 3 minutes on 16 cores), trains (tools/train_demo.py) until the
# call's budget is nearly spent and leaves in $OUT what comes back: resume.pt in parts of 15 MiB
# (r.part-*), global_cmvn and history.json. With EVAL=1 it then exports and converts the weights
# (float16, as shipped) and scores them with hark on the held-out sets: CPU FP32 and GPU FP32 /
# FP16 / BF16, attention rescoring, beam 10 ($OUT/eval.tar: each run's summary.json and
# per_utt.tsv; $OUT/demo-en-asr.tar: the converted entry).
#
# Usage (repository root there): tools/demo_asr_device.sh CARRY [BUDGET_S]
#   CARRY     engines.tar.xz and wenet.tar.xz (tools/demo_asr_device.sh --pack CARRY makes them
#             here, with hark.tar.xz and devlib.tar.xz for EVAL); r.part-* and global_cmvn from
#             an earlier call when a run goes on on a fresh machine. The repository with both
#             demo models is 39 MiB and all four archives 38, over the device's 64 MiB, so
#             --pack also links them into CARRY/train (engines, WeNet: the training calls) and
#             CARRY/eval (WeNet, hark, its libraries: an EVAL=1 call chained on the warm
#             machine, which has the engines unpacked and the corpus made)
#   BUDGET_S  wall seconds of this call (default 560)
# Environment: INIT (the converted model a new run starts from: default models/demo-en-asr, the
# shipped recogniser; "none" for random weights), TOTAL_MIN (the learning-rate schedule's minutes
# of training over all calls; required for a new run), HOURS (train hours to synthesise, 100),
# DATA_ARGS (more demo_data.py options, e.g. --extra-hours 25: the corpus is made once per
# machine, so they count in its first call), TRAIN_ARGS (more train_demo.py options; a resumed
# run keeps those it started with), EVAL (1: score at the end), WORK (/root/demoasr: it survives
# between calls while the machine is warm, so the next call reuses the corpus and resumes from
# WORK/exp/resume.pt).
#
# Here, afterwards: cat r.part-* > EXP/resume.pt; cp global_cmvn EXP/;
#   tools/train_demo.py export --data X --exp EXP; tools/convert_wenet.py ... (README of the model)
set -euo pipefail
if [ "${1:-}" = "--pack" ]; then
    C=${2:?usage: $0 --pack CARRY}
    [ -x .demo/root/usr/bin/espeak-ng ] || { echo "run tools/demo_engines.sh .demo first" >&2; exit 1; }
    [ -f .ext/wenet/__init__.py ] || { echo "WeNet's package is not in .ext/wenet" >&2; exit 1; }
    mkdir -p "$C"
    tar cJf "$C/engines.tar.xz" .demo
    tar cJf "$C/wenet.tar.xz" --exclude='__pycache__' .ext/wenet .ext/shims
    if [ -x build/hark ] && [ -f .devp1/devlib.tar.xz ]; then
        T=$(mktemp -d)
        mkdir -p "$T/bin" && strip --strip-debug -o "$T/bin/hark" build/hark
        tar cJf "$C/hark.tar.xz" -C "$T" bin && rm -rf "$T"
        cp .devp1/devlib.tar.xz "$C/"
        mkdir -p "$C/eval" && ln -f "$C/wenet.tar.xz" "$C/hark.tar.xz" "$C/devlib.tar.xz" "$C/eval/"
    fi
    mkdir -p "$C/train" && ln -f "$C/engines.tar.xz" "$C/wenet.tar.xz" "$C/train/"
    du -sh "$C"/*
    exit 0
fi
T0=$(date +%s)
C=$(cd "${1:?usage: $0 CARRY [BUDGET_S]}" && pwd)
BUDGET=${2:-560}
W=${WORK:-/root/demoasr}
OUT=${OUT:-$W/out}
export PYTHONUNBUFFERED=1
mkdir -p "$W/exp" "$OUT"
if [ ! -x .demo/root/usr/bin/espeak-ng ]; then
    [ -f "$C/engines.tar.xz" ] || { echo "$C has no engines.tar.xz and this machine has no .demo:" \
        "carry CARRY/train (a fresh machine)" >&2; exit 1; }
    tar xJf "$C/engines.tar.xz"
fi
[ -f .ext/wenet/__init__.py ] || tar xJf "$C/wenet.tar.xz"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true

# a fresh machine going on with an earlier call's run: its state, carried back
if [ ! -f "$W/exp/resume.pt" ] && compgen -G "$C/r.part-*" > /dev/null; then
    cat "$C"/r.part-* > "$W/exp/resume.pt"
    cp "$C/global_cmvn" "$W/exp/"
fi
START=()
if [ ! -f "$W/exp/resume.pt" ]; then
    [ "${INIT:-models/demo-en-asr}" != none ] && START=(--init "${INIT:-models/demo-en-asr}")
    START+=(--total-minutes "${TOTAL_MIN:?a new run needs TOTAL_MIN}")
fi

if [ ! -f "$W/corpus/stats.json" ]; then
    # shellcheck disable=SC2086
    python3 tools/demo_data.py --out "$W/corpus" --jobs "$(nproc)" --hours "${HOURS:-100}" \
        --engines-env .demo/env.sh ${DATA_ARGS:-} | tail -3
fi
RESERVE=$([ "${EVAL:-0}" = 1 ] && echo 150 || echo 25)   # after training: eval, save, split
LEFT=$((BUDGET - ($(date +%s) - T0) - RESERVE))
MIN=$(awk -v s="$LEFT" 'BEGIN { printf "%.2f", s / 60 }')
# shellcheck disable=SC2086
python3 tools/train_demo.py train --data "$W/corpus" --exp "$W/exp" --minutes "$MIN" \
    --jobs "$(nproc)" --resume "${START[@]}" ${TRAIN_ARGS:-}
(cd "$W/exp" && rm -f "$OUT"/r.part-* && split -b 15M resume.pt "$OUT/r.part-" &&
     cp global_cmvn history.json "$OUT/")

if [ "${EVAL:-0}" = 1 ]; then
    S=$W/hark
    mkdir -p "$S" && (cd "$S" && tar xJf "$C/hark.tar.xz" && tar xJf "$C/devlib.tar.xz")
    python3 tools/train_demo.py export --data "$W/corpus" --exp "$W/exp"
    rm -rf "$W/demo-en-asr"
    python3 tools/convert_wenet.py --checkpoint "$W/exp/final.pt" --config "$W/exp/train.yaml" \
        --units "$W/exp/units.txt" --dtype float16 --max-batch-size 32 --output "$W/demo-en-asr"
    tar cf "$OUT/demo-en-asr.tar" -C "$W" demo-en-asr
    E=$W/eval
    rm -rf "$E" && mkdir -p "$E"
    for set in test dev; do
        python3 -c 'import json, sys
d = sys.argv[1]
with open(sys.argv[2], "w") as s, open(sys.argv[3], "w") as t:
    for line in open(f"{d}/{sys.argv[4]}.jsonl"):
        r = json.loads(line)
        s.write(r["key"] + " " + d + "/" + r["wav"] + "\n")
        t.write(r["key"] + " " + r["text"] + "\n")' "$W/corpus" "$E/$set.scp" "$E/$set.trans" "$set"
        for run in cpu:fp32 cuda:0:fp32 cuda:0:fp16 cuda:0:bf16; do
            dev=${run%:*} prec=${run##*:}
            o=$E/$set-${dev%%:*}-$prec
            LD_LIBRARY_PATH=$S/devlib "$S/bin/hark" transcribe --model "$W/demo-en-asr" \
                --device "$dev" --precision "$prec" --decoding-method attention_rescoring \
                --beam-size 10 --wavscp "$E/$set.scp" --trans "$E/$set.trans" \
                --output-dir "$o" > "$o.log" 2>&1 || echo "$o: failed"
            [ -f "$o/summary.json" ] && python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], "WER %.2f%% CER %.2f%% RTFx %.0f" % (100 * d["wer"], 100 * d["cer"], d["rtfx"]))' \
                "$o/summary.json" "$set $run"
        done
    done
    tar cf "$OUT/eval.tar" -C "$E" --exclude='*.scp' .
fi
ls -la "$OUT"
echo "call took $(( $(date +%s) - T0 )) s"
