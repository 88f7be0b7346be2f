#!/usr/bin/env bash
# Packs Debian 12's espeak-ng and flite, relocatable, into DIR for the synthetic demo corpus
# (docs/demo-data.md): the GPU machine has no package manager, so the .debs are fetched here with
# `apt-get download`, unpacked with `dpkg -x`, pruned, and DIR/env.sh points PATH,
# LD_LIBRARY_PATH and ESPEAK_DATA_PATH at them. Checked by tools/demo_engines_test.sh (env -i).
# Usage: tools/demo_engines.sh DIR     (root or a sudo user; apt-get download itself needs no root)
#
# Libraries: the dependency closure of the engines (apt-cache depends --recurse) is carried, as
# tools/device_carry.sh does for hark, except glibc and the C++/gcc runtime, which every Ubuntu
# 24.04 image has in a newer version (Debian 12's binaries need glibc >= 2.34; 24.04 has 2.39).
# libpcaudio0 (espeak-ng's audio output, never used with -w) drags in ALSA, PulseAudio, libsndfile
# and X11's libxcb: a bare CUDA image lacks most of them, so they all come along.
#
# Festival is not carried: its English voices need festival + libestools + festlex-cmu +
# festlex-poslex, 15.5 MB installed before any voice, and kallpc16k / kdlpc16k / us-slt-hts add
# 13 MB more (29 MB in all, over the 15 MB budget); two of the three (kal, slt) are the same
# speakers flite already has, so the only new speaker (kdl) is not worth it.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR=$1
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
ENGINES=(espeak-ng libespeak-ng1 espeak-ng-data libpcaudio0 libsonic0 flite libflite1)
# glibc and the compiler runtime: present (newer) on the target; data-only packages not needed
SKIP_RE='^(libc6|libgcc-s1|gcc-[0-9]+-base|libstdc\+\+6|libcrypt1|libasound2-data|libx11-data)$'

if ! apt-cache show "${ENGINES[@]}" >/dev/null 2>&1; then
    echo "updating the package lists" >&2
    $SUDO apt-get update -qq
fi
mapfile -t pkgs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                       --no-breaks --no-replaces --no-enhances --no-pre-depends "${ENGINES[@]}" |
                     grep -v '^ ' | grep -v '^<' | sort -u | grep -v -E "$SKIP_RE")

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
rm -rf "$DIR/root" "$DIR/debs"
mkdir -p "$DIR/debs" "$DIR/root"
# as root, apt's sandbox user (_apt) could not write into DIR: download as root, quietly
SANDBOX=()
[ -n "$SUDO" ] || SANDBOX=(-o APT::Sandbox::User=root)
(cd "$DIR/debs" && apt-get download "${SANDBOX[@]}" "${pkgs[@]}" >/dev/null)
for d in "$DIR"/debs/*.deb; do
    dpkg -x "$d" "$DIR/root"
done
printf '%s\n' "${pkgs[@]}" > "$DIR/packages.txt"
rm -rf "$DIR/debs"

# prune: docs, man pages, locale, headers, static libs, config, and every espeak-ng dictionary
# but English (the voices, variants, phoneme tables and language definitions stay: small)
R=$DIR/root
rm -rf "${R:?}"/usr/share "${R:?}"/usr/include "${R:?}"/etc "${R:?}"/usr/lib/systemd \
       "${R:?}"/lib/systemd "${R:?}"/usr/libexec "${R:?}"/usr/sbin "${R:?}"/sbin
find "$R" -name '*.a' -delete
ED=$R/usr/lib/x86_64-linux-gnu/espeak-ng-data
[ -d "$ED" ] || { echo "espeak-ng-data not found under $R" >&2; exit 1; }
find "$ED" -maxdepth 1 -name '*_dict' ! -name en_dict -delete
rm -rf "$ED"/mbrola_ph "$ED"/voices/mb
# keep only the programs the corpus uses
find "$R"/usr/bin "$R"/bin -type f ! -name espeak-ng ! -name flite -delete 2>/dev/null || true
find "$R" -type d -empty -delete

# the text demo_data.py reads (the GPU machine has no ../shared): LJSpeech's transcripts and the
# real-speech test list, whose sentences must stay out of training
SH=$(dirname "$0")/../../shared/data
if [ -f "$SH/text/ljspeech_transcripts.tsv" ]; then
    mkdir -p "$DIR/text"
    cp "$SH/text/ljspeech_transcripts.tsv" "$SH/audio/en/wav.scp" "$SH/audio/en/trans.txt" "$DIR/text/"
else
    echo "warning: $SH/text is absent: copy the transcripts into $DIR/text by hand" >&2
fi
# the extra training text (demo_data.py --extra-hours): WordNet 3.0's example sentences and
# glosses from Debian's wordnet-base (Princeton's WordNet licence: use and redistribution with its
# notice, which text/WORDNET-LICENSE keeps), as id<TAB>text lines
mkdir -p "$DIR/text" "$DIR/wn"
(cd "$DIR/wn" && apt-get download "${SANDBOX[@]}" wordnet-base >/dev/null && dpkg -x wordnet-base_*.deb x)
python3 "$(dirname "$0")/demo_text.py" --wordnet "$DIR/wn/x/usr/share/wordnet" --out "$DIR/text/wordnet.tsv"
cp "$DIR/wn/x/usr/share/doc/wordnet-base/copyright" "$DIR/text/WORDNET-LICENSE"
rm -rf "$DIR/wn"

cat > "$DIR/env.sh" <<'EOF'
# source this: puts the relocated espeak-ng and flite first on PATH (written by tools/demo_engines.sh)
HARK_ENGINES=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
export PATH="$HARK_ENGINES/root/usr/bin:$PATH"
export LD_LIBRARY_PATH="$HARK_ENGINES/root/usr/lib/x86_64-linux-gnu:$HARK_ENGINES/root/lib/x86_64-linux-gnu:$HARK_ENGINES/root/usr/lib/x86_64-linux-gnu/pulseaudio${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# the folder that holds espeak-ng-data/ (libespeak-ng appends /espeak-ng-data itself)
export ESPEAK_DATA_PATH="$HARK_ENGINES/root/usr/lib/x86_64-linux-gnu"
EOF
echo "$(wc -l < "$DIR/packages.txt") packages in $DIR: $(tr '\n' ' ' < "$DIR/packages.txt")"
du -sh "$DIR"
