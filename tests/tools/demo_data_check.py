#!/usr/bin/env python3
"""Checks tools/demo_text.py and tools/demo_data.py (run by tests/tools/test_demo_data.c):
normalisation and the sentence filter on fixed cases, then a tiny corpus synthesised from a
made-up transcript file: manifests, WAV headers, split and voice disjointness, the real-speech
ids kept out of training, a second run that redoes nothing, and an engine that always fails;
the extra text: WordNet's data files parsed (made-up synsets) and --extra-hours' sentences in
train only, alternating examples and glosses, never a test, dev, real or round-trip sentence.
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


WN_HEADER = '  1 This software and database is being provided to you, the LICENSEE\n'
WORDNET = {
    'noun': ['00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived or '
             'known or inferred to have its own distinct existence (living or nonliving); '
             '"the entity was seen at night"; "it had no name"  \n',
             '00037200 04 n 01 credit 1 001 @ 00035189 n 0000 | used in the phrase `to your '
             "credit' in order to praise; \"she was not the...credible fool he expected\"  \n"],
    'verb': ['00002325 29 v 01 respire 1 005 $ 00001740 v 0000 01 + 02 00 | breathe easily '
             'again, as after exertion; "the pen is mightier than the sword"  \n'],
    'adj': ['00001740 00 a 01 able 0 005 = 05207437 n 0000 | (usually followed by `to\') having '
            'the necessary means; "able to swim very well"; "she was able to program her '
            'computer"  \n'],
    'adv': [],
}


def wordnet(tmp):
    d = os.path.join(tmp, 'wordnet')
    os.makedirs(d, exist_ok=True)
    for pos, lines in WORDNET.items():
        with open(os.path.join(d, 'data.' + pos), 'w', encoding='latin-1') as f:
            f.write(WN_HEADER + ''.join(lines))
    got = demo_text.load_wordnet(d)
    want = [('wn-noun-00001740-e1', 'the entity was seen at night'),
            ('wn-noun-00001740-e2', 'it had no name'),
            ('wn-noun-00001740-g1', 'that which is perceived or known or inferred to have its '
             'own distinct existence'),
            ('wn-noun-00037200-e1', 'she was not the...credible fool he expected'),
            ('wn-verb-00002325-e1', 'the pen is mightier than the sword'),
            ('wn-verb-00002325-g1', 'breathe easily again, as after exertion'),
            ('wn-adj-00001740-e1', 'able to swim very well'),
            ('wn-adj-00001740-e2', 'she was able to program her computer'),
            ('wn-adj-00001740-g1', 'having the necessary means')]
    check(sorted(got) == sorted(want), f'load_wordnet: {got}')
    ex = demo_text.extra_sentences(got + [('wn-x-1-e9', 'It had no NAME!')],
                                   banned={'able to swim very well'})
    ids = [s['id'] for s in ex]
    check('wn-noun-00037200-e1' not in ids, 'extra_sentences keeps "the...credible"')
    check('wn-adj-00001740-e1' not in ids, 'extra_sentences keeps a banned target')
    check(ids.count('wn-noun-00001740-e2') + ids.count('wn-x-1-e9') == 1,
          'extra_sentences keeps a target twice')
    check(all(s['target'] == demo_text.normalize(s['text']) for s in ex), 'extra targets')
    tsv = os.path.join(tmp, 'wordnet.tsv')
    r = subprocess.run([sys.executable, os.path.join(ROOT, 'tools', 'demo_text.py'), '--wordnet',
                        d, '--out', tsv], capture_output=True, text=True)
    check(r.returncode == 0 and sorted(demo_text.load_transcripts(tsv)) == sorted(got),
          f'demo_text.py --wordnet: {r.stdout}{r.stderr}')
    return tsv


SENTENCES = [
    'the quick brown fox jumps over the lazy dog', 'she sells sea shells by the sea shore',
    'a stitch in time saves nine of them', 'the early bird catches the worm today',
    'all that glitters is not gold, my friend', "don't count your chickens before they hatch",
    'an apple a day keeps the doctor away', 'the pen is mightier than the sword',
    'actions speak louder than words, they say', 'every cloud has a silver lining somewhere',
    'Mr. Jones paid 5 dollars for it', 'practice makes perfect in the long run',
    'the quick brown fox jumps over the lazy dog',  # a duplicate text: one split only
]


def corpus(tmp, env_sh, wn_tsv):
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
    extra(args, out, man, wn_tsv)


def extra(args, out, man, wn_tsv):
    """--extra-hours: the WordNet sentences join train only, none with a test or dev target (the
    verb's example is T007's text, in test or dev) or a round-trip sentence's target. With
    --flite-share 1 as well: the first round and the extra text all flite, dev as before."""
    with open(wn_tsv, 'a') as f:  # a round-trip test sentence (examples/sentences-en.tsv)
        own = demo_text.load_transcripts(demo_data.OWN_SENTENCES)[0][1]
        f.write(f'wn-noun-99999999-e1\t{own}\n')
        for k, split in enumerate(('dev', 'test')):  # and a dev and a test sentence, capitalised
            f.write(f'wn-noun-9999999{k}-e1\t{man[split][0]["text"].capitalize()}.\n')
    out3 = out + '-extra'
    a3 = [x if x != out else out3 for x in args]
    a3[a3.index('--hours') + 1] = '0.01'
    r = subprocess.run(a3 + ['--extra-hours', '0.005', '--extra', wn_tsv, '--flite-share', '1'],
                       capture_output=True, text=True)
    check(r.returncode == 0, f'--extra-hours failed: {r.stdout}{r.stderr}')
    if r.returncode:
        return
    with open(os.path.join(out3, 'train.jsonl')) as f:
        train = [json.loads(line) for line in f]
    wn = [m for m in train if '-wn-' in m['key']]
    for split in ('dev', 'test'):  # the same utterances as without the extra text
        with open(os.path.join(out3, split + '.jsonl')) as f:
            check([json.loads(line) for line in f] == man[split], f'extra text changes {split}')
    lj = [m for m in train if '-wn-' not in m['key']]
    first = lj[:len({m['key'].rsplit('-', 1)[1] for m in lj})]  # round 0: each sentence once
    check(first and all(m['engine'] == 'flite' for m in first + wn),
          f"--flite-share 1: {[m['voice'] for m in first + wn]}")
    held = {m['text'] for s in ('dev', 'test') for m in man[s]}
    kinds = [m['key'].rsplit('-', 1)[1][0] for m in wn]
    check(wn and not {m['text'] for m in wn} & held, f'extra text: {[m["text"] for m in wn]}')
    check(demo_text.normalize(own) not in {m['text'] for m in wn}, 'a round-trip sentence trains')
    alt = 2 * min(kinds.count('e'), kinds.count('g'))
    check(alt >= 2 and all(kinds[i] != kinds[i + 1] for i in range(alt - 1)),
          f'examples and glosses do not alternate: {kinds}')
    check(all(m['voice'].split('+')[-1] not in demo_data.HELDOUT_VARIANTS and
              m['voice'] != 'flite:rms' for m in wn), 'a held-out voice speaks extra text')
    st = json.load(open(os.path.join(out3, 'stats.json')))['extra']
    check(st['sentences'] == len(wn) and st['hours'] > 0 and st['usable'] == 7,
          f'stats extra {st}')


def main():
    tmp = sys.argv[1]
    env_sh = sys.argv[2] if len(sys.argv) > 2 and os.path.exists(sys.argv[2]) else None
    unit()
    wn_tsv = wordnet(tmp)
    env = demo_data.load_env(env_sh)
    have = all(shutil.which(b, path=env.get('PATH')) for b in ('espeak-ng', 'flite'))
    if not have:
        print('espeak-ng or flite is absent (tools/demo_engines.sh makes them)')
        return 77 if not failures else 1
    corpus(tmp, env_sh, wn_tsv)
    print(f'{len(failures)} failed checks' if failures else 'all checks passed')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
