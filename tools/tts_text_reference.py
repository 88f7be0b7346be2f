#!/usr/bin/env python3
"""Reference symbol ids from DLE FastSpeech's (or Tacotron2's) ORIGINAL Python text front end.

Runs `text_to_sequence(text, ['english_cleaners'])` of NVIDIA DeepLearningExamples'
CUDA-Optimized/FastSpeech/fastspeech/text_norm, kept OUTSIDE the repository (extract it with
`git archive <commit> CUDA-Optimized/FastSpeech/fastspeech/text_norm | tar -x -C /tmp/dle`), on
    * every line of --tsv (LJSpeech's `key<TAB>text` transcripts, or plain lines), and
    * with --synthetic, generated lines that exercise numbers, ordinals, years, dollars,
      decimals, abbreviations and braces (keys "syn-N"),
With --tacotron2, DLE's PyTorch/SpeechSynthesis/Tacotron2/tacotron2/text instead (extract
`PyTorch/SpeechSynthesis/Tacotron2/tacotron2/text` the same way; --dle names the directory
holding `tacotron2/` or `PyTorch/SpeechSynthesis/Tacotron2/` under it): the same pipeline with
DLE's own table-based transliteration; --sweep adds "a<c>b" for every code point c of the
ranges hark's C front end reproduces (U+007F-U+017F, U+2000-U+20CF, U+FF00-U+FFEF).
It writes `key<TAB>id id ...<TAB>text` lines (the text with TAB/newline escaped as \\t, \\n) to
--output. tests/text/test_tts_text.c reads that file (HARK_TTS_TEXT_REF) and compares hark's ids.

Needs Debian's python3-unidecode and python3-inflect (tools/install-deps.sh).
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)


def synthetic_lines():
    rnd = random.Random(19)
    out = []
    for n in list(range(0, 3101)) + [rnd.randrange(3101, 10 ** rnd.randrange(4, 13))
                                     for _ in range(1500)]:
        out.append(f"{n}")
    for n in list(range(0, 1200)) + [rnd.randrange(1, 10 ** rnd.randrange(2, 10))
                                     for _ in range(500)]:
        suf = {1: "st", 2: "nd", 3: "rd"}.get(n % 10 if n % 100 not in (11, 12, 13) else 0, "th")
        out.append(f"the {n}{suf} time, {n}th or {n}st")
    for _ in range(600):
        d = rnd.choice(["", "0", "1", str(rnd.randrange(0, 100000))])
        c = rnd.choice(["", "0", "1", "01", "5", "50", str(rnd.randrange(0, 1000))])
        sep = rnd.choice([".", ".", ",", ""])
        out.append(f"paid ${d}{sep}{c} and ${rnd.randrange(1, 2_000_000):,}.")
    for _ in range(300):
        out.append(f"{rnd.randrange(0, 10000)}.{rnd.randrange(0, 1000)} or "
                   f"{rnd.randrange(0, 10**7):,} and 1.2.3 and {rnd.randrange(1000, 3000)}s")
    for w in ["Mrs.", "Mr.", "Dr.", "St.", "Co.", "Jr.", "Maj.", "Gen.", "Drs.", "Rev.", "Lt.",
              "Hon.", "Sgt.", "Capt.", "Esq.", "Ltd.", "Col.", "Ft.", "MRS.", "xdr.", "_dr.",
              "1st.", "first.", "dr.dr.", "(st.)"]:
        out.append(f"{w} Smith met {w.lower()} Jones, at {w}")
    out += ["Turn left on {HH AW1 S T AH0 N} Street.", "{AA1 B}{K}x", "a {} b {x}}",
            "{HH AW1\tS}", "ok {HH AW1} then\n{AA1} gone", "caf\u00e9 \u00fcber na\u00efve \u00c6sop",
            "\u201cquoted\u201d \u2014 dash \u2013 en\u2026 it\u2019s \u00a35 and \u00bd",
            "  spaced\t\ttabs\nnewline  ", "UPPER lower MiXeD 42nd", "\u00df \u00f8 \u0142 \u0153"]
    return [(f"syn-{i}", t) for i, t in enumerate(out)]


SWEEP_RANGES = ((0x7F, 0x180), (0x2000, 0x20D0), (0xFF00, 0xFFF0))


def sweep_lines():
    return [(f"cp-{cp:04X}", f"a{chr(cp)}b") for lo, hi in SWEEP_RANGES for cp in range(lo, hi)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dle", required=True,
                    help="directory holding fastspeech/text_norm (or CUDA-Optimized/FastSpeech/"
                         "fastspeech/text_norm under it)")
    ap.add_argument("--tsv", help="key<TAB>text lines (e.g. ljspeech_transcripts.tsv)")
    ap.add_argument("--synthetic", action="store_true", help="add the generated lines")
    ap.add_argument("--tacotron2", action="store_true",
                    help="DLE Tacotron2's text package instead of FastSpeech's")
    ap.add_argument("--sweep", action="store_true",
                    help="add one line per code point of the transliteration ranges")
    ap.add_argument("--output", required=True, help="file to write (keep it outside the repo)")
    args = ap.parse_args(argv)

    if args.tacotron2:
        root = None
        for cand in (args.dle, os.path.join(args.dle, "PyTorch", "SpeechSynthesis", "Tacotron2")):
            if os.path.isdir(os.path.join(cand, "tacotron2", "text")):
                root = cand
                break
        if root is None:
            print(f"tts_text_reference: no tacotron2/text package under {args.dle}",
                  file=sys.stderr)
            return 1
        sys.path.insert(0, root)
        import warnings
        warnings.simplefilter("ignore")  # its unidecoder warns on every dropped character
        from tacotron2.text import text_to_sequence  # the original, unmodified
    else:
        root = None
        for cand in (args.dle, os.path.join(args.dle, "fastspeech"),
                     os.path.join(args.dle, "CUDA-Optimized", "FastSpeech", "fastspeech")):
            if os.path.isdir(os.path.join(cand, "text_norm")):
                root = cand
                break
        if root is None:
            print(f"tts_text_reference: no text_norm package under {args.dle}", file=sys.stderr)
            return 1
        sys.path.insert(0, root)
        from text_norm import text_to_sequence  # the original, unmodified

    lines = []
    if args.tsv:
        with open(args.tsv, encoding="utf-8") as f:
            for i, line in enumerate(f):
                line = line.rstrip("\n")
                key, _, text = line.partition("\t")
                if not _:
                    key, text = f"line-{i}", line
                lines.append((key, text))
    if args.synthetic:
        lines += synthetic_lines()
    if args.sweep:
        lines += sweep_lines()
    n_fail = 0
    with open(args.output, "w", encoding="utf-8") as f:
        for key, text in lines:
            try:
                ids = text_to_sequence(text, ["english_cleaners"])
                idtxt = " ".join(map(str, ids))
            except Exception as ex:  # the original raises on some inputs: record it
                idtxt = "ERROR " + type(ex).__name__
                n_fail += 1
            esc = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            f.write(f"{key}\t{idtxt}\t{esc}\n")
    print(f"wrote {args.output}: {len(lines)} lines ({n_fail} raise in the original)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
