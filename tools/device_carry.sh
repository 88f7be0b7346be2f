#!/usr/bin/env bash
# Packs what a GPU run on the lent device machine needs into two git-ignored folders, each under
# the device tool's 64 MiB carry limit (the machine has CUDA but none of Debian's libraries):
#   .devrun1/  devlib.tar.xz (the Debian shared libraries build/hark links, from ldd), bin/ (hark,
#              hark_tests, bench_hgemm, bench_loopback, stripped of debug info), shared/ (the golden files the GPU tests read)
#   .devrun2/  the converted golden model (tests/support/golden_model.c's cache)
# On the device: unpack .devrun1 into a stage folder, then run with LD_LIBRARY_PATH pointing at
# the libraries, HARK_SHARED at the shared/ subset and HARK_GOLDEN_MODEL at the model; the
# device-side commands are in docs/benchmarks.md. Usage: tools/device_carry.sh (it brings the
# binaries up to date first: `make` alone leaves build/hark_tests stale, and a stale test binary
# once made a whole device run test old code).
set -euo pipefail
cd "$(dirname "$0")/.."
make -j"$(nproc)" build/hark build/hark_tests bench >/dev/null
G=data/golden/wenet_u2pp_conformer_small
rm -rf .devrun1 .devrun2 && mkdir -p .devrun1/bin .devrun1/devlib .devrun1/shared/$G .devrun2
for f in $(ldd build/hark_tests build/hark | awk '/=>/ {print $3}' | sort -u |
           grep -v -E 'cuda|cublas|cufft|libc\.so|libm\.so|libstdc|libgcc_s|ld-linux|libpthread|libdl\.|librt\.'); do
    cp -L "$f" .devrun1/devlib/
done
(cd .devrun1 && tar cJf devlib.tar.xz devlib && rm -rf devlib)
for b in hark hark_tests bench/bench_hgemm bench/bench_loopback; do
    [ -f build/$b ] && strip --strip-debug -o .devrun1/bin/$(basename $b) build/$b
done
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
du -sh .devrun1 .devrun2
