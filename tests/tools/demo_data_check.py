#!/usr/bin/env python3
"""Checks tools/demo_text.py and tools/demo_data.py (run by tests/tools/test_demo_data.c):
normalisation and the sentence filter on fixed cases, then a tiny corpus synthesised from a
made-up transcript file: manifests, WAV headers, split and voice disjointness, the real-speech
ids kept out of training, a second run that redoes nothing, and an engine that always fails.
Usage: demo_data_check.py TMPDIR [ENGINES_ENV]   exit 0 = pass, 77 = skip (no engine), 1 = fail
"""
import json
import os
import shutil
import subprocess
import sys
import wave

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
sys.path.insert(0, os.path.join(ROOT, 'tools'))
import demo_data  # noqa: E402
import demo_text  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print('    check failed:', what)


def unit():
    n = demo_text.normalize
    cases = [('Printing, in the only sense -- with which', 'printing in the only sense with which'),
             ("the students' books, don\u2019t 'quote'", "the students books don't quote"),
             ('well-known\u2014U.S.A.  done!', 'well known usa done'),
             ('  A  B\tC\n', 'a b c')]
    for src, want in cases:
        check(n(src) == want, f'normalize({src!r}) = {n(src)!r}, want {want!r}')
    r = demo_text.reject_reason
    for bad in ['He paid 5 pounds to the man.', 'it cost him \u00a35 in all', 'Mr. Smith came in',
                'They met Dr Smith and St. John there', 'as far as No. nine went on',
                'the agent J. Smith went out', 'by the U.S. Government itself', 'in Henry VIII times',
                'files of the FBI were read', 'M\u00fcller was to die that day', 'two words']:
        check(r(bad) is not None, f'reject_reason({bad!r}) accepts it')
    for good in ['Printing, in the only sense with which we are at present concerned,',
                 "I said that I didn't know the man's name.", 'He came -- and went away.']:
        check(r(good) is None, f'reject_reason({good!r}) = {r(good)}')


SENTENCES = [
    'the quick brown fox jumps over the lazy dog', 'she sells sea shells by the sea shore',
    'a stitch in time saves nine of them', 'the early bird catches the worm today',
    'all that glitters is not gold, my friend', "don't count your chickens before they hatch",
    'an apple a day keeps the doctor away', 'the pen is mightier than the sword',
    'actions speak louder than words, they say', 'every cloud has a silver lining somewhere',
    'Mr. Jones paid 5 dollars for it', 'practice makes perfect in the long run',
    'the quick brown fox jumps over the lazy dog',  # a duplicate text: one split only
]


def corpus(tmp, env_sh):
    tsv = os.path.join(tmp, 'text.tsv')
    with open(tsv, 'w') as f:
        for i, s in enumerate(SENTENCES):
            f.write(f'T{i:03d}\t{s}\n')
    scp = os.path.join(tmp, 'wav.scp')
    with open(scp, 'w') as f:
        f.write('lj-T005 wav/lj-T005.wav\nother x.wav\n')
    trans = os.path.join(tmp, 'trans.txt')
    with open(trans, 'w') as f:  # a real test utterance with the same words as T007
        f.write('lj-T005 x\nother The pen is mightier than the SWORD\n')
    out = os.path.join(tmp, 'c')
    args = [sys.executable, os.path.join(ROOT, 'tools', 'demo_data.py'), '--out', out,
            '--jobs', '2', '--hours', '0.004', '--seed', '7', '--n-test', '3', '--n-dev', '2',
            '--transcripts', tsv, '--real-scp', scp, '--real-trans', trans, '--chunk', '4']
    if env_sh:
        args += ['--engines-env', env_sh]
    r = subprocess.run(args, capture_output=True, text=True)
    check(r.returncode == 0, f'demo_data.py failed: {r.stdout}{r.stderr}')
    if r.returncode:
        return
    man = {}
    for split in ('train', 'dev', 'test'):
        with open(os.path.join(out, split + '.jsonl')) as f:
            man[split] = [json.loads(line) for line in f]
        check(man[split], f'{split}.jsonl is empty')
    train_v, held_v = demo_data.voices(demo_data.load_env(env_sh))
    keys = set()
    for split, recs in man.items():
        for m in recs:
            check(set(m) >= {'key', 'wav', 'sr', 'dur', 'text', 'voice', 'engine'},
                  f'{split}: fields {sorted(m)}')
            check(m['key'] not in keys, f'key {m["key"]} twice')
            keys.add(m['key'])
            check(m['text'] == demo_text.normalize(m['text']) and
                  set(m['text']) <= set("abcdefghijklmnopqrstuvwxyz' "), f'target {m["text"]!r}')
            check(m['engine'] == m['voice'].split(':')[0], f'engine of {m["key"]}')
            with wave.open(os.path.join(out, m['wav'])) as w:
                check(w.getnchannels() == 1 and w.getsampwidth() == 2, f'{m["wav"]}: format')
                check(w.getframerate() == m['sr'], f'{m["wav"]}: rate {w.getframerate()}')
                check(abs(w.getnframes() / w.getframerate() - m['dur']) < 0.002,
                      f'{m["wav"]}: duration')
            check(m['sr'] == (22050 if m['engine'] == 'espeak' else
                              8000 if m['voice'] == 'flite:kal' else 16000), f'{m["key"]}: rate')
    texts = {s: {m['text'] for m in man[s]} for s in man}
    check(not texts['test'] & (texts['train'] | texts['dev']), 'a test sentence trains')
    check(not texts['dev'] & texts['train'], 'a dev sentence trains')
    check({m['voice'] for m in man['test']} == set(held_v), 'test voices are not the held-out set')
    check(not {m['voice'] for m in man['train'] + man['dev']} & set(held_v),
          'a held-out voice trains')
    check(not set(held_v) & set(train_v), 'voice lists overlap')
    check(not any(v.split('+')[-1] in demo_data.HELDOUT_VARIANTS for v in train_v),
          'a held-out espeak variant trains')
    check('the quick brown fox jumps over the lazy dog' in texts['train'] | texts['dev'] |
          texts['test'], 'the duplicated sentence is missing')
    check(demo_text.normalize(SENTENCES[5]) in texts['test'], 'the real-speech id is not in test')
    check(demo_text.normalize(SENTENCES[7]) not in texts['train'] | texts['dev'],
          'a real-speech text trains')
    check(not any('jones' in t for s in texts for t in texts[s]), 'a rejected sentence is used')
    stats = json.load(open(os.path.join(out, 'stats.json')))
    check(stats['hours']['train']['hours'] >= 0.004, f'train hours {stats["hours"]["train"]}')
    check(stats['failed'] == 0, f'{stats["failed"]} failed')
    # a second run: every file is there, nothing is synthesised, the manifests are the same
    r2 = subprocess.run(args, capture_output=True, text=True)
    check(r2.returncode == 0, 'second run failed')
    for split in man:
        with open(os.path.join(out, split + '.jsonl')) as f:
            check([json.loads(line) for line in f] == man[split], f'{split}: resumed run differs')
    check(not json.load(open(os.path.join(out, 'stats.json')))['speed'],
          'the resumed run synthesised again')
    # an engine that always fails: its utterances are logged and skipped, the run still succeeds
    fake = os.path.join(tmp, 'fakebin')
    os.makedirs(fake, exist_ok=True)
    with open(os.path.join(fake, 'flite'), 'w') as f:
        f.write('#!/bin/sh\necho broken >&2\nexit 3\n')
    os.chmod(os.path.join(fake, 'flite'), 0o755)
    fenv = os.path.join(tmp, 'fake_env.sh')
    with open(fenv, 'w') as f:
        if env_sh:
            f.write(f'. {env_sh}\n')
        f.write(f'export PATH={fake}:$PATH\n')
    out2 = out + '-broken'
    a2 = [x if x != out else out2 for x in args]
    a2 = a2[:a2.index('--engines-env')] if '--engines-env' in a2 else a2
    r3 = subprocess.run(a2 + ['--engines-env', fenv], capture_output=True, text=True)
    check(r3.returncode == 0, f'a failing engine stopped the run: {r3.stderr}')
    if r3.returncode == 0:
        log = open(os.path.join(out2, 'failed.txt')).read()
        check('flite-rms' in log and 'exit 3' in log, 'failures are not logged')
        with open(os.path.join(out2, 'test.jsonl')) as f:
            check(all(json.loads(line)['engine'] == 'espeak' for line in f),
                  'a failed synthesis is in the manifest')


def main():
    tmp = sys.argv[1]
    env_sh = sys.argv[2] if len(sys.argv) > 2 and os.path.exists(sys.argv[2]) else None
    unit()
    env = demo_data.load_env(env_sh)
    have = all(shutil.which(b, path=env.get('PATH')) for b in ('espeak-ng', 'flite'))
    if not have:
        print('espeak-ng or flite is absent (tools/demo_engines.sh makes them)')
        return 77 if not failures else 1
    corpus(tmp, env_sh)
    print(f'{len(failures)} failed checks' if failures else 'all checks passed')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
