#!/usr/bin/env python3
"""The demo voice's round trip (issue 22): `hark speak` says held-out sentences with a TTS model
(default models/demo-en-tts), `hark transcribe` recognises them with the demo recogniser
(models/demo-en-asr), and hark's scorer (docs/scoring.md) gives the WER. Test:
tests/tools/test_demo_tts.c (demo_tts_round_trip, skipped while models/demo-en-tts is absent).

  tools/demo_tts_roundtrip.py [--hark build/hark] [--model models/demo-en-tts]
      [--asr models/demo-en-asr] [--count 10] [--min-words 5] [--max-words 15]
      [--out DIR] [--max-wer PERCENT] [--sentences FILE]
      [--resynth VOCODER --engines-env ENV/env.sh]

Sentences: the test split of tools/demo_text.py (never trained on by the voice nor by the
recogniser), those of --min-words to --max-words words, in id order, --count of them; or
--sentences FILE (KEY<TAB>TEXT lines; the references are the texts normalised by
demo_text.normalize). Prints the WER line and exits 1 when it is over --max-wer.

--resynth VOCODER measures what a voice can reach instead: each sentence is said by the voice
the demo voice imitates (tools/demo_tts_data.py's espeak-ng en-us, from --engines-env) and
resynthesised through the vocoder's own mel (`hark vocode --model VOCODER --wav`), so the
recogniser hears espeak-ng as the vocoder renders it, with no acoustic model in between.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import demo_text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sentences(a):
    """[(key, raw text, reference)]"""
    if a.sentences:
        out = []
        with open(a.sentences, encoding='utf-8') as f:
            for line in f:
                k, _, t = line.rstrip('\n').partition('\t')
                if t:
                    out.append((k, t, demo_text.normalize(t)))
        return out[:a.count]
    import demo_tts_data
    out = []
    for s in demo_tts_data.tts_sentences('test'):
        n = len(s['target'].split())
        if a.min_words <= n <= a.max_words:
            out.append((s['id'], ' '.join(s['text'].split()), s['target']))
    return out[:a.count]


def resynth(a, sents, out):
    """--resynth: espeak-ng's WAVs (out/engine/) through the vocoder into out/wav/"""
    import demo_data
    import demo_tts_data
    env = demo_data.load_env(a.engines_env)
    for k, text, _ in sents:
        raw = os.path.join(out, 'engine', k + '.wav')
        demo_tts_data.synth({'id': k, 'clean': demo_tts_data.clean(text), 'wav': raw}, env)
        subprocess.run([a.hark, 'vocode', '--model', a.resynth, '--wav', raw, '-o',
                        os.path.join(out, 'wav', k + '.wav')], check=True,
                       stdout=subprocess.DEVNULL)


def last_words(scores):
    """how many sentences' last word the recogniser missed (scores/ref.txt, hyp.txt: 'KEY WORDS'
    lines, normalised): where a recogniser drops sounds at an utterance's end
    (docs/demo-voice.md)"""
    def read(name):
        with open(os.path.join(scores, name), encoding='utf-8') as f:
            return {p[0]: p[1:] for p in (line.split() for line in f) if p}
    ref, hyp = read('ref.txt'), read('hyp.txt')
    return sum(1 for k, r in ref.items() if r and hyp.get(k, [])[-1:] != r[-1:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--hark', default=os.environ.get('HARK_BIN', os.path.join(ROOT, 'build', 'hark')))
    ap.add_argument('--model', default=os.path.join(ROOT, 'models', 'demo-en-tts'))
    ap.add_argument('--asr', default=os.path.join(ROOT, 'models', 'demo-en-asr'))
    ap.add_argument('--count', type=int, default=10)
    ap.add_argument('--min-words', type=int, default=5)
    ap.add_argument('--max-words', type=int, default=15)
    ap.add_argument('--sentences', help='KEY<TAB>TEXT lines instead of the test split')
    ap.add_argument('--out', help='keep the WAVs and the scores here')
    ap.add_argument('--max-wer', type=float, help='exit 1 when the WER (%%) is over this')
    ap.add_argument('--jobs', type=int, default=2)
    ap.add_argument('--resynth', metavar='VOCODER',
                    help="say the sentences with espeak-ng and this vocoder instead of --model")
    ap.add_argument('--engines-env', help="tools/demo_engines.sh's DIR/env.sh (--resynth)")
    a = ap.parse_args(argv)
    sents = sentences(a)
    if not sents:
        sys.exit('demo_tts_roundtrip: no sentences')
    out = a.out or tempfile.mkdtemp(prefix='hark-roundtrip-')
    os.makedirs(os.path.join(out, 'wav'), exist_ok=True)
    with open(os.path.join(out, 'text.tsv'), 'w', encoding='utf-8') as f:
        f.writelines(f'{k}\t{t}\n' for k, t, _ in sents)
    with open(os.path.join(out, 'trans.txt'), 'w', encoding='utf-8') as f:
        f.writelines(f'{k} {r}\n' for k, _, r in sents)
    with open(os.path.join(out, 'wav.scp'), 'w') as f:
        f.writelines(f'{k} wav/{k}.wav\n' for k, _, _ in sents)
    try:
        if a.resynth:
            resynth(a, sents, out)
        else:
            subprocess.run([a.hark, 'speak', '--model', a.model, '--text-file',
                            os.path.join(out, 'text.tsv'), '--output-dir',
                            os.path.join(out, 'wav')], check=True, stdout=subprocess.DEVNULL)
        r = subprocess.run([a.hark, 'transcribe', '--model', a.asr, '--wavscp',
                            os.path.join(out, 'wav.scp'), '--trans',
                            os.path.join(out, 'trans.txt'), '--jobs', str(a.jobs),
                            '--output-dir', os.path.join(out, 'scores')],
                           check=True, capture_output=True, text=True)
        lastw = last_words(os.path.join(out, 'scores'))
    except (subprocess.CalledProcessError, RuntimeError, OSError) as e:
        sys.exit(f'demo_tts_roundtrip: {e}')
    finally:
        if not a.out:
            shutil.rmtree(out, ignore_errors=True)
    m = re.search(r'WER ([0-9.]+)%[^\n]*', r.stdout + r.stderr)
    if not m:
        sys.exit('demo_tts_roundtrip: no WER in the output of hark transcribe:\n' + r.stdout +
                 r.stderr)
    what = f'espeak-ng through {os.path.basename(a.resynth)}' if a.resynth else 'round trip'
    print(f'{what}, {len(sents)} sentences: {m.group(0)}')
    print(f'last word wrong in {lastw} of {len(sents)} sentences')
    if a.max_wer is not None and float(m.group(1)) > a.max_wer:
        print(f'WER {m.group(1)}% is over {a.max_wer}%')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
