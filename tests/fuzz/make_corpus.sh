#!/bin/sh
# make_corpus.sh — regenerates tests/fuzz/corpus/ (seeds for fuzz_audio_decode) with libsndfile
# by building and running tests/fuzz/make_corpus.c. Replayed by tests/audio/test_audio.c.
# Usage: tests/fuzz/make_corpus.sh   (from the repository root)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
${CC:-cc} -std=c11 -D_GNU_SOURCE -O1 -Wall -Wextra -Werror -o "$tmp/make_corpus" \
    "$here/make_corpus.c" -lsndfile -lm
mkdir -p "$here/corpus"
rm -f "$here"/corpus/*
"$tmp/make_corpus" "$here/corpus"
ls -l "$here/corpus"
