#!/usr/bin/env bash
# Packs what a GPU run on the lent device machine needs into git-ignored folders, each under the
# device tool's 64 MiB carry limit together with the tracked tree (about 19 MB) (the machine has
# CUDA but none of Debian's libraries):
#   .devrun1/  devlib.tar.xz (the Debian shared libraries build/hark links, from ldd), bin.tar.xz (hark,
#              hark_tests, bench_hgemm, bench_loopback, bench_silero_vad, stripped of debug
#              info), shared/ (the WeNet golden files the GPU tests read)
#   .devrun2/  the converted WeNet golden model (tests/support/golden_model.c's cache)
#   .devrun3/  shared/: the Jasper J1, FastSpeech / HiFi-GAN and Tacotron 2 / WaveGlow golden sets without their
#              checkpoints, the English audio and silero_vad.onnx, and converted/: those
#              checkpoints and the Silero VAD converted here (HARK_GOLDEN_CONVERTED; the device has
#              no /usr/bin/python3 with torch or onnx to convert with), and dle/: DLE's own outputs
#              for other Jasper / QuartzNet configurations with their conversions, when the tests
#              made them (HARK_DLE_SRC set; tests/support/dle_jasper.c; HARK_DLE_REF on the device)
#   .devp1/ .devp2/ ...  .devrun2, .devrun3 and .ext (the PyTorch peers' sources, when present) as
#              one tar in 40 MiB parts: too big to travel whole
#              beside the tree, they go one part per call to a machine kept warm (chain the calls;
#              it goes back after 30 s idle)
# On the device: unpack .devrun1 into a stage folder, copy each part there, untar them, then run
# with LD_LIBRARY_PATH pointing at the libraries, HARK_SHARED at the shared/ subset,
# HARK_GOLDEN_MODEL at .devrun2 and HARK_GOLDEN_CONVERTED at .devrun3/converted; the device-side
# commands are in docs/benchmarks.md. Usage: tools/device_carry.sh (it brings the binaries up to
# date first: `make` alone leaves build/hark_tests stale, and a stale test binary once made a
# whole device run test old code).
set -euo pipefail
cd "$(dirname "$0")/.."
make -j"$(nproc)" build/hark build/hark_tests bench >/dev/null
G=data/golden/wenet_u2pp_conformer_small
rm -rf .devrun1 .devrun2 .devrun3 .devp[0-9]* && mkdir -p .devrun1/bin .devrun1/devlib .devrun1/shared/$G .devrun2 \
    .devrun3/shared/data/golden
for f in $(ldd build/hark_tests build/hark | awk '/=>/ {print $3}' | sort -u |
           grep -v -E 'cuda|cublas|cufft|libc\.so|libm\.so|libstdc|libgcc_s|ld-linux|libpthread|libdl\.|librt\.'); do
    cp -L "$f" .devrun1/devlib/
done
(cd .devrun1 && tar cJf devlib.tar.xz devlib && rm -rf devlib)
for b in hark hark_tests bench/bench_hgemm bench/bench_loopback bench/bench_silero_vad; do
    [ -f build/$b ] && strip --strip-debug -o .devrun1/bin/$(basename $b) build/$b
done
(cd .devrun1 && tar cJf bin.tar.xz bin && rm -rf bin) # xz: the carry limit counts the tree too
src=../shared/$G
cp "$src/results.json" .devrun1/shared/$G/
cp -r "$src/wavs" .devrun1/shared/$G/
for d in "$src"/goldens/*/; do
    u=$(basename "$d")
    mkdir -p .devrun1/shared/$G/goldens/$u
    for f in fbank.npy enc_full.npy ctc_logprobs_full.npy; do
        [ -f "$d/$f" ] && cp "$d/$f" .devrun1/shared/$G/goldens/$u/
    done
done
model=$(ls -td /tmp/hark-test-cache-$(id -u)/wenet_small-*/m 2>/dev/null | head -1)
[ -n "$model" ] || { echo "no converted golden model: run make test first" >&2; exit 1; }
cp -r "$model" .devrun2/m
# the checkpoints stay here: their conversions travel instead (HARK_GOLDEN_CONVERTED)
(cd ../shared/data/golden && tar cf - --exclude='*.pt' --exclude='g_0*' jasper tts/README.md \
    tts/fastspeech tts/hifigan_v3 tts/hifigan_v3_real tts/tacotron2 tts/waveglow) |
    tar xf - -C .devrun3/shared/data/golden
mkdir -p .devrun3/shared/data/models/silero-vad
cp ../shared/data/models/silero-vad/silero_vad.onnx .devrun3/shared/data/models/silero-vad/
cp -r ../shared/data/audio .devrun3/shared/data/
for tag in jasper_j1 fastspeech hifigan_v3 hifigan_v3_real silero_vad tacotron2 waveglow; do
    c=$(ls -td /tmp/hark-test-cache-$(id -u)/$tag-*/m 2>/dev/null | head -1)
    [ -n "$c" ] || { echo "no converted $tag: run make test first" >&2; exit 1; }
    mkdir -p .devrun3/converted/$tag && cp -r "$c" .devrun3/converted/$tag/m
done
# golden sets beside J1 (Q1 when shared): their conversions, for tests/support/dle_jasper.c
for c in $(ls -td /tmp/hark-test-cache-$(id -u)/jasper_*-*/m 2>/dev/null); do
    tag=$(basename "$(dirname "$c")") && tag=${tag%-*}
    [ -e .devrun3/converted/$tag ] || { mkdir -p .devrun3/converted/$tag && cp -r "$c" .devrun3/converted/$tag/m; }
done
# the DLE reference sets of tests/support/dle_jasper.c, the newest of each, without checkpoints
for d in $(ls -td /tmp/hark-test-cache-$(id -u)/dle-*/ 2>/dev/null); do
    n=$(basename "$d") && n=${n#dle-} && n=${n%-*}
    [ "$n" = j1_replay ] || [ -e .devrun3/dle/$n ] || [ ! -f "$d/m/1/model.safetensors" ] && continue
    mkdir -p .devrun3/dle/$n && (cd "$d" && tar cf - --exclude='*.pt' ref m) | tar xf - -C .devrun3/dle/$n
done
[ -d .devrun3/dle ] || echo "no DLE reference sets: HARK_DLE_SRC=... make test makes them" >&2
# the generated Tacotron 2 of awkward sizes (tests/model/tacotron2/test_tacotron2_gpu.c)
/usr/bin/python3 tools/convert_tacotron2.py --random 3 --config tests/model/tacotron2/awkward.json \
    --output .devrun3/converted/tacotron2_awkward/m >/dev/null
tar cf - .devrun2 .devrun3 $([ -d .ext ] && echo .ext) | split -b 40M -d -a 1 - .devpart.
for f in .devpart.*; do
    d=.devp$((${f##*.} + 1)) && mkdir -p $d && mv "$f" $d/
done
du -sh .devrun1 .devrun2 .devrun3 .devp[0-9]*
