#!/usr/bin/env python3
"""Text side of hark's synthetic demo corpus (issue 22, docs/demo-data.md): the training target
(normalize), the filter that keeps only sentences a TTS engine speaks the way they are spelled,
the seeded train / dev / test split of the LJSpeech transcripts, and the extra training text:
WordNet's example sentences and glosses (Debian's wordnet-base), everyday words LJSpeech's
19th-century prose lacks. Tested by tests/tools/test_demo_data.c (through
tests/tools/demo_data_check.py).

CLI: tools/demo_text.py [--transcripts TSV] [--real-scp wav.scp] [--real-trans trans.txt]
                        [--seed S] [--out sentences.tsv]   (prints the split sizes)
     tools/demo_text.py --wordnet DIR --out wordnet.tsv    (DIR: wordnet-base's data.* files;
                                                             writes id<TAB>text lines)
"""
import argparse
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, '..', '..', 'shared', 'data')
TRANSCRIPTS = os.path.join(SHARED, 'text', 'ljspeech_transcripts.tsv')
REAL_SCP = os.path.join(SHARED, 'audio', 'en', 'wav.scp')
REAL_TRANS = os.path.join(SHARED, 'audio', 'en', 'trans.txt')

N_TEST = 300
N_DEV = 300
MIN_WORDS, MAX_WORDS = 3, 40

# typographic apostrophes, hyphens and dashes: the same sets as hark's wer_normalize
# (docs/scoring.md), so targets and scoring agree
_APOS = "'\u2019\u02bc"
_DASH = '-\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d'


def normalize(text):
    """The training target: lower-case a-z, apostrophes inside words, single spaces.
    Hyphens and dashes become spaces; other punctuation disappears without leaving one
    (as in docs/scoring.md: "U.S.A." -> "usa", "students' books" -> "students books")."""
    t = text.lower()
    for c in _DASH:
        t = t.replace(c, ' ')
    for c in _APOS[1:]:
        t = t.replace(c, "'")
    t = re.sub(r'\s+', ' ', t)
    t = re.sub(r"[^a-z' ]", '', t)
    # an apostrophe is kept only between two letters
    t = re.sub(r"(?<![a-z])'|'(?![a-z])", '', t)
    return ' '.join(t.split())


# Abbreviations the engines expand ("Mr." -> "mister") while the target keeps the letters;
# matched case-insensitively as a whole word followed by a full stop.
ABBREVIATIONS = {
    'mr', 'mrs', 'messrs', 'mme', 'ms', 'dr', 'drs', 'st', 'no', 'nos', 'co', 'jr', 'sr', 'esq',
    'capt', 'col', 'gen', 'lt', 'lieut', 'maj', 'sgt', 'rev', 'hon', 'ft', 'mt', 'ltd', 'vs',
    'etc', 'viz', 'ca', 'cf', 'vol', 'ch', 'chap', 'pp', 'p', 'fig', 'jan', 'feb', 'mar', 'apr',
    'jun', 'jul', 'aug', 'sep', 'sept', 'oct', 'nov', 'dec', 'govt', 'dept', 'bros', 'inc', 'ave',
    'gov', 'sen', 'rep', 'pres', 'prof', 'supt', 'insp', 'sec', 'i.e', 'e.g', 'a.m', 'p.m',
}
_ABBREV_RE = re.compile(r'(?<![A-Za-z.])(' + '|'.join(re.escape(a) for a in sorted(
    ABBREVIATIONS, key=len, reverse=True)) + r')\.', re.IGNORECASE)
_SYMBOLS_RE = re.compile(r'[0-9£$&%§#@/\\+=*<>|~^_{}]')
_INITIALISM_RE = re.compile(r'[A-Za-z]\.[A-Za-z]')           # U.S., i.e
_INITIAL_RE = re.compile(r'(?<![A-Za-z])[A-HJ-Z]\.')          # "J. Smith" (not the pronoun I)
_ROMAN_RE = re.compile(r'(?<![A-Za-z])(?:[IVXLCDM]{2,}|[VXLCDM])(?![A-Za-z])')  # II, XIV, V
_CAPS_RE = re.compile(r'(?<![A-Za-z])[A-Z]{2,}(?![A-Za-z])')  # FBI: spelt out by the engines
_NONASCII_OK = set(_APOS + _DASH + '\u201c\u201d\u2018\u00a0')


def reject_reason(text):
    """Why a sentence's spoken form would not match normalize(text), or None if it is usable.
    Cheap and conservative: it drops a sentence rather than guess how an engine reads it."""
    if any(ord(c) > 127 and c not in _NONASCII_OK for c in text):
        return 'non-ascii'
    if _SYMBOLS_RE.search(text):
        return 'digit-or-symbol'
    if _ABBREV_RE.search(text):
        return 'abbreviation'
    if _INITIALISM_RE.search(text) or _INITIAL_RE.search(text):
        return 'initials'
    if _ROMAN_RE.search(text):
        return 'roman-or-capitals'
    if _CAPS_RE.search(text):
        return 'roman-or-capitals'
    n = len(normalize(text).split())
    if n < MIN_WORDS or n > MAX_WORDS:
        return 'length'
    return None


def spoken(text):
    """The text as handed to an engine: the original punctuation (it shapes the prosody), quotes
    and brackets removed, no leading dash an engine could take for an option."""
    t = re.sub(r'["\u201c\u201d\[\]()]', '', text)
    t = ' '.join(t.split())
    return t.lstrip('-\u2014 ')


def load_transcripts(path=TRANSCRIPTS):
    """[(id, text)] from 'LJ001-0001<TAB>text' lines."""
    out = []
    with open(path, encoding='utf-8') as f:
        for line in f:
            line = line.rstrip('\n')
            if not line:
                continue
            i, _, t = line.partition('\t')
            out.append((i, t))
    return out


def load_real(scp=REAL_SCP, trans=REAL_TRANS):
    """(LJSpeech ids of the real-speech test set, normalised texts of all its utterances)."""
    ids, texts = set(), set()
    if scp and os.path.exists(scp):
        with open(scp) as f:
            for line in f:
                k = line.split()[0] if line.strip() else ''
                if k.startswith('lj-'):
                    ids.add(k[3:])
    if trans and os.path.exists(trans):
        with open(trans, encoding='utf-8') as f:
            for line in f:
                k, _, t = line.rstrip('\n').partition(' ')
                if t:
                    texts.add(normalize(t))
    return ids, texts


def split_sentences(items, real_ids=(), real_texts=(), seed=22, n_test=N_TEST, n_dev=N_DEV):
    """Deterministic split of [(id, text)] into {'train','dev','test'} lists of dicts
    {id, text (spoken), target} plus 'rejected' {reason: count}.

    Sentences are grouped by target, so a text said twice lands in one split. Every usable
    sentence of the real-speech test set (real_ids) goes to test; test is filled up to n_test
    with a seeded sample, dev takes n_dev more, train the rest. A sentence whose target equals a
    real test utterance's (real_texts) never trains."""
    rejected = {}
    groups = {}
    for i, t in items:
        why = reject_reason(t)
        if why:
            rejected[why] = rejected.get(why, 0) + 1
            continue
        groups.setdefault(normalize(t), []).append({'id': i, 'text': spoken(t),
                                                    'target': normalize(t)})
    targets = sorted(groups)
    forced = [g for g in targets if any(s['id'] in real_ids for s in groups[g])]
    banned = [g for g in targets if g in real_texts and g not in forced]
    rest = [g for g in targets if g not in forced and g not in banned]
    rng = random.Random(seed)
    rng.shuffle(rest)
    k = max(0, n_test - len(forced))
    test = forced + rest[:k]
    dev = rest[k:k + n_dev]
    train = rest[k + n_dev:]
    out = {'rejected': rejected, 'excluded': sum(len(groups[g]) for g in banned)}
    for name, gs in (('train', train), ('dev', dev), ('test', test)):
        out[name] = sorted((s for g in gs for s in groups[g]), key=lambda s: s['id'])
    return out


WORDNET_POS = ('noun', 'verb', 'adj', 'adv')
_WN_QUOTED = re.compile(r'"([^"]*)"')
_WN_PAREN = re.compile(r'\([^()]*\)')


def load_wordnet(folder):
    """[(id, text)]: every example sentence (the quoted parts) and gloss (the rest, split at
    semicolons) of WordNet's data.noun/.verb/.adj/.adv synsets, ids wn-POS-OFFSET-eK / -gK.
    Parenthesised asides leave glosses (they are notes, not text); a part with a backquote (a
    quoted phrase: "the phrase `to your credit'") or with nothing left is skipped. The texts go
    through reject_reason and normalize like LJSpeech's (extra_sentences)."""
    out = []
    for pos in WORDNET_POS:
        with open(os.path.join(folder, 'data.' + pos), encoding='latin-1') as f:
            for line in f:
                if line.startswith(' ') or '|' not in line:
                    continue  # the licence header
                offset = line.split(' ', 1)[0]
                body = line.split('|', 1)[1].strip()
                parts = [('e', q) for q in _WN_QUOTED.findall(body)]
                gloss = _WN_PAREN.sub(' ', _WN_QUOTED.sub(' ', body))
                parts += [('g', g) for g in gloss.split(';')]
                k = {'e': 0, 'g': 0}
                for kind, t in parts:
                    t = ' '.join(t.split()).strip(' ,:;')
                    if not t or '`' in t or '"' in t:
                        continue
                    k[kind] += 1
                    out.append((f'wn-{pos}-{offset}-{kind}{k[kind]}', t))
    return out


_JOINED_RE = re.compile(r'[A-Za-z][.,;:!?]+[A-Za-z]')  # "the...credible": normalize joins them


def extra_sentences(items, banned=()):
    """The usable extra training sentences of [(id, text)] as dicts {id, text, target}, sorted
    by id: reject_reason's filter, no punctuation between two letters (normalize would join the
    words: "the...credible" -> "thecredible"), one sentence per target (the first id), and none
    whose target is in banned (the test and dev targets, the real-speech and round-trip test
    sentences)."""
    banned = set(banned)
    seen = {}
    for i, t in sorted(items):
        if reject_reason(t) or _JOINED_RE.search(t):
            continue
        g = normalize(t)
        if g in banned or g in seen:
            continue
        seen[g] = {'id': i, 'text': spoken(t), 'target': g}
    return sorted(seen.values(), key=lambda s: s['id'])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--transcripts', default=TRANSCRIPTS)
    ap.add_argument('--real-scp', default=REAL_SCP)
    ap.add_argument('--real-trans', default=REAL_TRANS)
    ap.add_argument('--seed', type=int, default=22)
    ap.add_argument('--out', help='write split<TAB>id<TAB>spoken text<TAB>target lines here')
    ap.add_argument('--wordnet', help="wordnet-base's folder (data.noun ...): write its "
                    'sentences to --out as id<TAB>text lines instead')
    a = ap.parse_args(argv)
    if a.wordnet:
        if not a.out:
            ap.error('--wordnet needs --out')
        items = load_wordnet(a.wordnet)
        with open(a.out, 'w', encoding='utf-8') as f:
            f.writelines(f'{i}\t{t}\n' for i, t in items)
        print(f'{len(items)} WordNet texts, {len(extra_sentences(items))} usable: {a.out}')
        return 0
    ids, texts = load_real(a.real_scp, a.real_trans)
    sp = split_sentences(load_transcripts(a.transcripts), ids, texts, a.seed)
    for name in ('train', 'dev', 'test'):
        print(f'{name}: {len(sp[name])} sentences')
    print('rejected:', ', '.join(f'{k} {v}' for k, v in sorted(sp['rejected'].items())),
          f'(kept {sum(len(sp[n]) for n in ("train", "dev", "test"))} of',
          f'{sum(sp["rejected"].values()) + sum(len(sp[n]) for n in ("train", "dev", "test")) + sp["excluded"]})')
    if a.out:
        with open(a.out, 'w', encoding='utf-8') as f:
            for name in ('train', 'dev', 'test'):
                for s in sp[name]:
                    f.write(f"{name}\t{s['id']}\t{s['text']}\t{s['target']}\n")
    return 0


if __name__ == '__main__':
    sys.exit(main())
