#!/usr/bin/env bash
# Checks a folder made by tools/demo_engines.sh the way the GPU machine will use it: every library
# the relocated espeak-ng and flite load resolves inside DIR (glibc apart), and each English voice
# speaks to a 16-bit mono WAV from `env -i` with only DIR/env.sh sourced. As root, both run once
# more in a chroot holding only glibc and DIR, so neither a system library nor a silent fall-back
# to /usr/lib/.../espeak-ng-data can pass. Usage: tools/demo_engines_test.sh DIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR=$(cd "$1" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
clean() { env -i HOME="$TMP" bash -c ". '$DIR/env.sh'; $1"; }

# shellcheck disable=SC2016 # expanded by the clean shell
outside=$(clean 'ldd "$(command -v espeak-ng)" "$(command -v flite)"' |
          grep '=>' | grep -v "$DIR/" |
          grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+)\.so' || true)
if [ -n "$outside" ]; then echo "FAIL: libraries from outside $DIR:"; echo "$outside"; fail=1; fi
for b in espeak-ng flite; do
    p=$(clean "command -v $b")
    case $p in "$DIR"/*) ;; *) echo "FAIL: $b resolves to $p"; fail=1 ;; esac
done

# a WAV's rate, channels and bits (python3 -c: the wave module is enough)
wavinfo() { python3 -c 'import sys,wave; w=wave.open(sys.argv[1]); print(w.getframerate(), w.getnchannels(), 8*w.getsampwidth(), w.getnframes())' "$1"; }
check() { # name file rate
    local info rate ch bits n
    info=$(wavinfo "$2" 2>/dev/null) || { echo "FAIL: $1 wrote no WAV"; fail=1; return; }
    read -r rate ch bits n <<< "$info"
    if [ "$rate" != "$3" ] || [ "$ch" != 1 ] || [ "$bits" != 16 ] || [ "$n" -lt 8000 ]; then
        echo "FAIL: $1: rate $rate ch $ch bits $bits frames $n"; fail=1
    else echo "ok: $1 ($rate Hz, $n frames)"; fi
}
T="the quick brown fox jumps over the lazy dog"
for v in en-us en-gb en-gb-scotland en-gb-x-gbclan en-gb-x-rp en-gb-x-gbcwmd en-029 en-us-nyc; do
    clean "espeak-ng -v $v+f2 -s 170 -p 60 -w '$TMP/$v.wav' '$T'" || true
    check "espeak-ng $v+f2" "$TMP/$v.wav" 22050
done
# kal is flite's 8 kHz diphone voice; awb_time is a talking clock (limited domain), not tested
for v in kal:8000 kal16:16000 awb:16000 rms:16000 slt:16000; do
    clean "flite -voice ${v%:*} -t '$T' -o '$TMP/${v%:*}.wav'" || true
    check "flite ${v%:*}" "$TMP/${v%:*}.wav" "${v#*:}"
done
# As root: both engines in a chroot that holds nothing but glibc (the dynamic loader, libc, libm)
# and DIR, mounted at its own path in a private mount namespace: no library, no espeak-ng-data
# from this system can be picked up, as on a bare GPU image.
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null && command -v chroot >/dev/null; then
    CR=$TMP/chroot
    mkdir -p "$CR/lib64" "$CR/lib/x86_64-linux-gnu" "$CR$DIR" "$CR/out" "$CR/tmp"
    cp -L /lib64/ld-linux-x86-64.so.2 "$CR/lib64/"
    cp -L /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libm.so.6 "$CR/lib/x86_64-linux-gnu/"
    # shellcheck disable=SC2016 # expanded by the clean shell
    vars=$(clean 'echo PATH=$PATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH ESPEAK_DATA_PATH=$ESPEAK_DATA_PATH')
    unshare -m bash -c "mount --bind '$DIR' '$CR$DIR' &&
        env -i HOME=/out $vars chroot '$CR' espeak-ng -v en-gb-x-rp+m3 -w /out/espeak.wav '$T' &&
        env -i HOME=/out $vars chroot '$CR' flite -voice slt -t '$T' -o /out/flite.wav" || true
    check "espeak-ng in a glibc-only chroot" "$CR/out/espeak.wav" 22050
    check "flite in a glibc-only chroot" "$CR/out/flite.wav" 16000
fi
# the extra training text (demo_data.py --extra-hours) and its licence notice
n=$(wc -l < "$DIR/text/wordnet.tsv" 2>/dev/null || echo 0)
if [ "$n" -lt 150000 ] || [ ! -s "$DIR/text/WORDNET-LICENSE" ]; then
    echo "FAIL: text/wordnet.tsv has $n lines (or text/WORDNET-LICENSE is missing)"; fail=1
else echo "ok: text/wordnet.tsv ($n WordNet texts)"; fi
[ $fail -eq 0 ] && echo "demo engines in $DIR: all checks passed"
exit $fail
