#!/usr/bin/env bash
# icefall transducer benchmark (issue 17): hark (`hark bench` on a converted model) next to
# icefall's own PyTorch code (bench/icefall_peer.py: pruned_transducer_stateless3's Conformer
# transducer at the recipe's full size) with the same weights, the same work (B utterances of
# random-normal 80-bin features of 10 s -> encoder -> greedy_search_batch or
# modified_beam_search (beam 4) -> token ids on the host), the same machine, the same run.
# Usage: bench/icefall.sh --prepare-ext [SRC]    fills $ICEFALL_EXT/icefall with the icefall files
#                                                the peer imports (SRC: icefall's git directory,
#                                                bare or a checkout, default the mirror
#                                                /work/.mirror/k2-fsa+icefall/repo; or an icefall
#                                                source tree) and $ICEFALL_EXT/icefall-shims with
#                                                ../shared/tools/icefall (SHIMS names another)
#        bench/icefall.sh cuda [BATCHES]         (default 1,64,256) hark fp32, fp16, bf16 on
#                                                cuda:0; PyTorch eager fp32, fp16, bf16, compile
#                                                fp16 and bf16
#        bench/icefall.sh cpu [BATCHES]          (default 1,2) a local check: hark fp32 on the
#                                                CPU (the peer alone while hark has no CPU
#                                                benchmark for the family), PyTorch fp32
# Variables: HARK_ARGS (more `hark bench` options, e.g. --search-threads 16), METHODS (default greedy_search; "greedy_search modified_beam_search" adds the beam
# search, BEAM 4), HARK_MODES (hark's precisions), PEER_MODES (bench/icefall_peer.py's modes),
# PEER_MIN_TIME (2 s), AUDIO_SECONDS (10), HARK (build/hark), PYTHON (python3; Debian's
# /usr/bin/python3 for cpu), OUT_DIR (/tmp/hark-icefall-bench: the model, hark.jsonl,
# peer.jsonl), ICEFALL_EXT (.ext), SMALL=1 (bench/icefall_peer.py --small: a 2-layer model, for
# the CPU check), APPEND=1 (add to OUT_DIR's rows instead of starting anew: a run split in parts,
# the table of all of them at the end of the last). icefall's sources and the shims are never
# committed (.ext is git-ignored); without them it says how to fill .ext and exits 2.
set -euo pipefail
ext=${ICEFALL_EXT:-.ext}
COMMIT=36e0420c7e3e849a25b3d24dbf913c424f3d23c9 # the commit the T1 goldens were made with
R=egs/librispeech/ASR
# what bench/icefall_peer.py imports (train.py, beam_search.py and what they import), as the
# recipe's folder sees it: pruned_transducer_stateless3's links to stateless2 and further resolved
ICEFALL_FILES="LICENSE icefall/__init__.py icefall/byte_utils.py icefall/checkpoint.py
icefall/context_graph.py icefall/decode.py icefall/diagnostics.py icefall/dist.py icefall/env.py
icefall/lm_wrapper.py icefall/ngram_lm.py icefall/utils.py icefall/rnn_lm/__init__.py
icefall/rnn_lm/model.py icefall/transformer_lm/__init__.py icefall/transformer_lm/attention.py
icefall/transformer_lm/encoder.py icefall/transformer_lm/model.py icefall/transformer_lm/scaling.py
$R/pruned_transducer_stateless3/asr_datamodule.py $R/pruned_transducer_stateless3/beam_search.py
$R/pruned_transducer_stateless3/conformer.py $R/pruned_transducer_stateless3/decoder.py
$R/pruned_transducer_stateless3/encoder_interface.py $R/pruned_transducer_stateless3/gigaspeech.py
$R/pruned_transducer_stateless3/joiner.py $R/pruned_transducer_stateless3/librispeech.py
$R/pruned_transducer_stateless3/model.py $R/pruned_transducer_stateless3/optim.py
$R/pruned_transducer_stateless3/scaling.py $R/pruned_transducer_stateless3/train.py"
MARK=.hark-icefall-subset

if [ "${1:-}" = --prepare-ext ]; then
    src=${2:-/work/.mirror/k2-fsa+icefall/repo}
    dst=$ext/icefall
    if [ -e "$dst" ] && [ ! -f "$dst/$MARK" ]; then
        echo "bench/icefall.sh: $dst exists and is not a subset this script made; move it away" \
            "or set ICEFALL_EXT to another folder" >&2
        exit 2
    fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if [ -f "$src/icefall/__init__.py" ]; then
        tree=$src # an icefall source tree
    else
        gd=$src
        [ -d "$src/.git" ] && gd=$src/.git
        git --git-dir="$gd" archive "$COMMIT" LICENSE icefall "$R/pruned_transducer_stateless3" \
            "$R/pruned_transducer_stateless2" "$R/transducer_stateless/encoder_interface.py" |
            tar -x -C "$tmp"
        tree=$tmp
    fi
    rm -rf "$dst"
    for f in $ICEFALL_FILES; do
        mkdir -p "$dst/$(dirname "$f")"
        cp -L "$tree/$f" "$dst/$f" # links resolved: plain files travel to the GPU machine
    done
    if [ "$tree" = "$tmp" ]; then
        echo "icefall $COMMIT, the files bench/icefall_peer.py imports" >"$dst/$MARK"
    else
        echo "icefall from $src, the files bench/icefall_peer.py imports" >"$dst/$MARK"
    fi
    shims=${SHIMS:-../shared/tools/icefall}
    rm -rf "$ext/icefall-shims"
    mkdir -p "$ext/icefall-shims"
    cp "$shims/icefall_shims.py" "$shims/README.md" "$ext/icefall-shims/"
    du -sh "$dst" "$ext/icefall-shims"
    exit 0
fi

if [ ! -f "$ext/icefall/$R/pruned_transducer_stateless3/train.py" ] ||
    [ ! -f "$ext/icefall-shims/icefall_shims.py" ]; then
    cat >&2 <<EOF
bench/icefall.sh: icefall's sources or the import shims are not in $ext/ (git-ignored, never
committed). Fill them (icefall $COMMIT, the files the peer imports, and a copy of
../shared/tools/icefall):
    bench/icefall.sh --prepare-ext [ICEFALL_GIT_DIR_OR_SOURCE_TREE]
and carry $ext/icefall and $ext/icefall-shims to the GPU machine.
EOF
    exit 2
fi
dev=${1:-cpu}
case $dev in
cpu | cuda) ;;
*)
    echo "usage: bench/icefall.sh cuda|cpu [BATCHES] | --prepare-ext [SRC]" >&2
    exit 2
    ;;
esac
batches=${2:-$([ "$dev" = cpu ] && echo 1,2 || echo 1,64,256)}
PY=${PYTHON:-python3}
[ "$dev" = cpu ] && [ -x /usr/bin/python3 ] && PY=${PYTHON:-/usr/bin/python3}
HARK=${HARK:-build/hark}
out=${OUT_DIR:-/tmp/hark-icefall-bench}
secs=${AUDIO_SECONDS:-10}
methods=${METHODS:-greedy_search}
small=${SMALL:+--small}
mkdir -p "$out"
if ! $PY bench/icefall_peer.py export --icefall-root "$ext/icefall" --shims "$ext/icefall-shims" \
    $small --out "$out" >"$out/export.log" 2>&1; then
    cat "$out/export.log" >&2
    exit 1
fi
$PY tools/convert_icefall.py --recipe pruned_transducer_stateless3 --checkpoint \
    "$out/pretrained.pt" --tokens "$out/tokens.txt" --output "$out/model" >/dev/null
if [ -z "${APPEND:-}" ]; then
    : >"$out/hark.jsonl"
    : >"$out/peer.jsonl"
fi
if [ "$dev" = cpu ]; then
    hdev=cpu hmodes=${HARK_MODES:-fp32} pdev=cpu pmodes=${PEER_MODES:-fp32}
    threads=(--threads "$(nproc)")
else
    hdev=cuda:0 hmodes=${HARK_MODES:-fp32 fp16 bf16} pdev=cuda
    pmodes=${PEER_MODES:-fp32,fp16,bf16,compile,compile-bf16}
    threads=()
fi
hark_failed=0 peer_failed=0
for m in $methods; do
    for p in $hmodes; do
        if ! "$HARK" bench --model "$out/model" --batch "$batches" --seconds "$secs" \
            --device "$hdev" --precision "$p" --decoding-method "$m" ${HARK_ARGS:-} |
            tee -a "$out/hark.jsonl"; then
            echo "bench/icefall.sh: hark bench failed ($hdev $p $m)" >&2
            hark_failed=1
            [ "$dev" = cpu ] && break 2 # no CPU benchmark for the family yet: the peer alone
        fi
    done
done
for m in $methods; do
    if ! $PY bench/icefall_peer.py time --icefall-root "$ext/icefall" --shims "$ext/icefall-shims" \
        $small --ckpt "$out/pretrained.pt" --device "$pdev" --modes "$pmodes" \
        --batches "$batches" --seconds "$secs" --method "$m" --beam "${BEAM:-4}" \
        --min-time "${PEER_MIN_TIME:-2}" "${threads[@]}" 2>"$out/peer-$m.log" |
        grep --line-buffered '^{' | tee -a "$out/peer.jsonl"; then
        echo "bench/icefall.sh: bench/icefall_peer.py time --method $m failed:" >&2
        tail -n 20 "$out/peer-$m.log" >&2
        peer_failed=1
    fi
done
$PY - "$out/hark.jsonl" "$out/peer.jsonl" <<'PYEOF'
import json, sys
h = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
p = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
def name(r):  # hark's rows name their GPU path (hopper / ampere)
    return r["impl"] + ("/" + r["gpu_path"] if "gpu_path" in r else "")
def mode(r):
    return r.get("precision") or r.get("mode")
print(f"{'impl':12} {'mode':13} {'method':21} {'batch':>5} {'ms/batch':>10} {'RTFx':>9} "
      f"{'tokens':>7} {'mem MB':>7}")
for r in h + p:
    if "ms" not in r:
        print(f"{name(r):12} {mode(r) or '':13} {r.get('method', ''):21} {r.get('batch', '')!s:>5} "
              f"error: {r.get('error', '?')[:60]}")
        continue
    mem = r.get("peak_mem_mb") or r.get("peak_rss_mb") or ""
    print(f"{name(r):12} {mode(r):13} {r.get('method', ''):21} {r['batch']:5d} {r['ms']:10.2f} "
          f"{r['rtfx']:9.1f} {r.get('tokens', '')!s:>7} {mem!s:>7}")
h = [r for r in h if "ms" in r]
p = [r for r in p if "ms" in r]
key = lambda r: (r.get("method", ""), r["batch"], r.get("seconds", 0))
for r in h:
    for q in p:
        if key(r) == key(q):
            print(f"{name(r)} {mode(r)} {r['method']} / pytorch {q['mode']} at batch {r['batch']}: "
                  f"{q['ms'] / r['ms']:.2f}x")
# each side's fastest at each method and batch
for k in sorted({key(r) for r in h}):
    hb = min((x for x in h if key(x) == k), key=lambda x: x["ms"])
    qs = [x for x in p if key(x) == k]
    if qs:
        qb = min(qs, key=lambda x: x["ms"])
        print(f"fastest at {k[0]} batch {k[1]}: hark {mode(hb)} {hb['ms']:.2f} ms, pytorch "
              f"{qb['mode']} {qb['ms']:.2f} ms: {qb['ms'] / hb['ms']:.2f}x")
PYEOF
[ "$peer_failed" = 1 ] && exit 1
[ "$dev" = cuda ] && [ "$hark_failed" = 1 ] && exit 1
exit 0
