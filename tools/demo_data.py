#!/usr/bin/env python3
"""Synthesises hark's demo English corpus (issue 22, docs/demo-data.md) with espeak-ng and flite:
the voice list, the held-out test voices, and N parallel synthesis workers writing native-rate
16-bit mono WAVs and JSON-lines manifests. Text and splits come from tools/demo_text.py.
Tested by tests/tools/test_demo_data.c (through tests/tools/demo_data_check.py).

  tools/demo_data.py --out DIR --jobs N [--hours H] [--seed S] [--engines-env ENV/env.sh]
                     [--limit K] [--transcripts TSV] [--extra-hours X [--extra TSV]]
                     [--flite-share P]
  tools/demo_data.py --examples OUT [--engines-env ENV/env.sh]

The LJSpeech transcripts and the real-speech test list are read from ../shared/data, or else from
the text/ folder beside --engines-env (tools/demo_engines.sh copies them there for the GPU
machine).

Train: each train sentence is spoken by one more random training voice per round (its engine
flite with chance --flite-share, 0.3, while it has flite voices left) until the
measured train audio reaches --hours (less --extra-hours). With --extra-hours, that much more of
the train hours is extra text (tools/demo_text.py --wordnet: WordNet's examples and glosses, in
text/wordnet.tsv beside --engines-env unless --extra names it), each sentence once, by one
training voice, examples and glosses alternating in a seeded order; never a sentence whose target
is a test, dev, real-speech or examples/sentences-en.tsv one. Dev: dev sentences, each by one
training voice. Test: every test sentence by every held-out voice. Resumable: a WAV already
written is measured, not redone; a failed synthesis is logged in DIR/failed.txt and skipped.
"""
import argparse
import concurrent.futures as cf
import hashlib
import itertools
import json
import os
import random
import shlex
import subprocess
import sys
import time
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import demo_text  # noqa: E402

# espeak-ng's English voices (mbrola ones excluded: their voice data is not packaged)
ESPEAK_LANGS = ['en-us', 'en-gb', 'en-gb-scotland', 'en-gb-x-gbclan', 'en-gb-x-rp',
                'en-gb-x-gbcwmd', 'en-029', 'en-us-nyc']
# espeak-ng's variants (voices/!v) left out: sound effects rather than voices (robotic echo,
# distortion) and a speed test; whisper and whisperf stay (breathy but intelligible)
ESPEAK_VARIANTS_SKIP = {'croak', 'Demonic', 'UniRobot', 'anikaRobot', 'fast', 'robosoft',
                        'robosoft2', 'robosoft3', 'robosoft4', 'robosoft5', 'robosoft6',
                        'robosoft7', 'robosoft8'}
# flite's voices: kal is its 8 kHz diphone voice; awb_time (a talking clock) cannot read text
FLITE_VOICES = ['kal', 'kal16', 'awb', 'rms', 'slt']
# Held out for test, never in train or dev: three whole espeak variants (a male, a female and a
# Klatt-synthesiser voice; with any accent) and flite's rms. Test speaks them with these accents.
HELDOUT_VARIANTS = {'m7', 'f4', 'klatt3'}
HELDOUT_ESPEAK = ['en-us+m7', 'en-gb-x-rp+f4', 'en-gb-scotland+klatt3', 'en-029+m7']
HELDOUT_FLITE = ['rms']
ESPEAK_RATE = (130, 210)   # words per minute
ESPEAK_PITCH = (30, 70)    # 0..99
FLITE_STRETCH = (0.85, 1.2)  # duration_stretch (1 = the voice's own rate)
FLITE_F0 = (0.85, 1.15)      # times the voice's own mean f0
# a training utterance's engine is drawn first, then its voice: flite has 4 training voices to
# espeak-ng's 672, but they are the ones built from recordings of real speakers
ENGINE_WEIGHTS = {'espeak': 0.7, 'flite': 0.3}


def espeak_variants(env):
    """Variant names under espeak-ng-data/voices/!v, sorted; fixed fallbacks when absent."""
    for base in (env.get('ESPEAK_DATA_PATH'), '/usr/lib/x86_64-linux-gnu'):
        if base:
            d = os.path.join(base, 'espeak-ng-data', 'voices', '!v')
            if os.path.isdir(d):
                return sorted(v for v in os.listdir(d)
                          if v not in ESPEAK_VARIANTS_SKIP and ' ' not in v)
    return [f'm{i}' for i in range(1, 9)] + [f'f{i}' for i in range(1, 6)]


def voices(env):
    """(training voices, held-out voices): ids 'espeak:LANG+VARIANT' and 'flite:NAME'."""
    train = [f'espeak:{l}+{v}' for l in ESPEAK_LANGS for v in espeak_variants(env)
             if v not in HELDOUT_VARIANTS]
    train += [f'flite:{v}' for v in FLITE_VOICES if v not in HELDOUT_FLITE]
    held = [f'espeak:{v}' for v in HELDOUT_ESPEAK] + [f'flite:{v}' for v in HELDOUT_FLITE]
    return train, held


def pick_voice(rng, candidates, weights=ENGINE_WEIGHTS):
    """A voice from candidates: the engine by weights (among engines left; uniform when those
    left all weigh 0), then the voice uniformly."""
    by = {}
    for v in candidates:
        by.setdefault(v.split(':')[0], []).append(v)
    engines = sorted(by)
    w = [weights[x] for x in engines]
    e = rng.choices(engines, weights=w if sum(w) > 0 else None)[0]
    return rng.choice(by[e])


def slug(voice):
    return voice.replace(':', '-').replace('+', '_').replace(' ', '')


def load_env(path):
    """The environment after sourcing an engines folder's env.sh (None: this process's)."""
    env = dict(os.environ)
    if path:
        out = subprocess.run(['bash', '-c', f'. {shlex.quote(path)} && env -0'],
                             check=True, capture_output=True).stdout
        env = dict(kv.split('=', 1) for kv in out.decode().split('\0') if '=' in kv)
    return env


def job_args(voice, text, wav, rng):
    """(argv, tts settings) for one utterance; rng draws the rate and pitch."""
    engine, name = voice.split(':', 1)
    if engine == 'espeak':
        s, p = rng.randint(*ESPEAK_RATE), rng.randint(*ESPEAK_PITCH)
        return ['espeak-ng', '-v', name, '-s', str(s), '-p', str(p), '-w', wav, '--', text], \
            f'-s {s} -p {p}'
    st, f0 = rng.uniform(*FLITE_STRETCH), rng.uniform(*FLITE_F0)
    # flite's mean f0 differs per voice; scale the defaults (Hz) of the cg voices and kal
    base = {'slt': 170.0, 'kal': 105.0, 'kal16': 105.0, 'awb': 115.0, 'rms': 110.0}[name]
    return ['flite', '-voice', name, '--setf', f'duration_stretch={st:.3f}',
            '--setf', f'int_f0_target_mean={base * f0:.1f}', '-t', text, '-o', wav], \
        f'stretch {st:.3f} f0 {base * f0:.1f}'


def wav_info(path):
    """(sample rate, seconds) of a 16-bit mono WAV; raises on anything else."""
    with wave.open(path) as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2 or w.getnframes() == 0:
            raise ValueError(f'{path}: not 16-bit mono or empty')
        return w.getframerate(), w.getnframes() / w.getframerate()


def seeded(seed, *parts):
    h = hashlib.sha256('\0'.join(map(str, (seed,) + parts)).encode()).digest()
    return random.Random(int.from_bytes(h[:8], 'little'))


def synth(job, env, timeout=60):
    """Runs one job (dict); returns it with sr/dur filled, or with 'error'."""
    if os.path.exists(job['wav']):
        try:
            job['sr'], job['dur'] = wav_info(job['wav'])
            return job
        except Exception:  # a partial file from an interrupted run: redo it
            os.remove(job['wav'])
    os.makedirs(os.path.dirname(job['wav']), exist_ok=True)
    tmp = job['wav'] + '.part.wav'
    argv = [tmp if a == job['wav'] else a for a in job['argv']]
    t0 = time.time()
    try:
        r = subprocess.run(argv, env=env, capture_output=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f'exit {r.returncode}: {r.stderr.decode(errors="replace")[-200:]}')
        job['sr'], job['dur'] = wav_info(tmp)
        os.replace(tmp, job['wav'])
        job['synth_s'] = time.time() - t0
    except Exception as e:  # logged by the caller, never fatal
        job['error'] = str(e).replace('\n', ' ')
        if os.path.exists(tmp):
            os.remove(tmp)
    return job


def make_job(out, split, voice, sent, rng):
    key = f"{slug(voice)}-{sent['id']}"
    wav = os.path.join(out, 'wav', split, slug(voice), key + '.wav')
    argv, settings = job_args(voice, sent['text'], wav, rng)
    return {'key': key, 'wav': wav, 'text': sent['target'], 'voice': voice,
            'engine': voice.split(':')[0], 'tts': settings, 'argv': argv, 'split': split}


def run_jobs(jobs, env, n, failed_log):
    """Synthesises jobs on n workers (threads, each waiting on its own engine process); returns
    the finished ones in job order."""
    done = []
    with cf.ThreadPoolExecutor(max_workers=n) as ex:
        for j in ex.map(lambda j: synth(j, env), jobs):
            if 'error' in j:
                failed_log.write(f"{j['key']}\t{j['error']}\n")
                failed_log.flush()
            else:
                done.append(j)
    return done


def record(j, out):
    return json.dumps({'key': j['key'], 'wav': os.path.relpath(j['wav'], out), 'sr': j['sr'],
                       'dur': round(j['dur'], 3), 'text': j['text'], 'voice': j['voice'],
                       'engine': j['engine'], 'tts': j['tts']}) + '\n'


def resolve_text(a):
    """Fills in --transcripts / --real-scp / --real-trans: ../shared/data when there, else the
    copies tools/demo_engines.sh put in the engines folder's text/ (the GPU machine has no
    ../shared). A missing real-speech list is an error, not a silent leak of its sentences into
    training; --real-scp none opts out."""
    alt = os.path.join(os.path.dirname(os.path.abspath(a.engines_env)), 'text') \
        if a.engines_env else None
    for name, shared in (('transcripts', demo_text.TRANSCRIPTS), ('real_scp', demo_text.REAL_SCP),
                         ('real_trans', demo_text.REAL_TRANS)):
        if getattr(a, name) is None:
            p = shared
            if not os.path.exists(p) and alt:
                p = os.path.join(alt, os.path.basename(shared))
            setattr(a, name, p)
        if getattr(a, name) != 'none' and not os.path.exists(getattr(a, name)):
            sys.exit(f'demo_data.py: {getattr(a, name)} is absent (--{name.replace("_", "-")})')
    if getattr(a, 'extra_hours', 0) > 0:
        if a.extra is None and alt:
            a.extra = os.path.join(alt, 'wordnet.tsv')
        if not a.extra or not os.path.exists(a.extra):
            sys.exit(f'demo_data.py: --extra-hours needs the extra text ({a.extra or "--extra"} '
                     'is absent: tools/demo_engines.sh writes text/wordnet.tsv)')


OWN_SENTENCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'examples',
                             'sentences-en.tsv')


def extra_plan(a, sp, real_texts):
    """The extra train sentences in synthesis order (extra_sentences; examples and glosses
    alternate, each kind in a seeded shuffle), none with a test, dev, real-speech or round-trip
    (examples/sentences-en.tsv) target."""
    banned = {s['target'] for k in ('test', 'dev') for s in sp[k]} | set(real_texts)
    if os.path.exists(OWN_SENTENCES):
        banned |= {demo_text.normalize(t) for _, t in demo_text.load_transcripts(OWN_SENTENCES)}
    ex = demo_text.extra_sentences(demo_text.load_transcripts(a.extra), banned)
    kinds = [[], [], []]  # examples (ids ...-eK), glosses (...-gK), anything else
    for s in ex:
        kinds['eg'.find(s['id'].rsplit('-', 1)[1][0])].append(s)
    for i, k in enumerate(kinds):
        seeded(a.seed, 'extra', i).shuffle(k)
    order = []
    for i in range(max(len(k) for k in kinds)):
        order += [k[i] for k in kinds if i < len(k)]
    return order


def synth_until(jobs, limit_s, secs, out, label, env, a, failed, t0):
    """Synthesises jobs (any iterable), --chunk at a time, appending the finished ones to out,
    until secs (audio seconds so far) reaches limit_s or the jobs run out; returns secs."""
    it = iter(jobs)
    while secs < limit_s:
        chunk = list(itertools.islice(it, a.chunk))
        if not chunk:
            break
        done = run_jobs(chunk, env, a.jobs, failed)
        out += done
        secs += sum(j['dur'] for j in done)
        print(f'train {label}: {len(out)} utterances, {secs / 3600:.2f} h, '
              f'{time.time() - t0:.0f} s', flush=True)
    return secs


def build(a):
    t0 = time.time()
    env = load_env(a.engines_env)
    train_v, held_v = voices(env)
    ids, texts = demo_text.load_real(a.real_scp, a.real_trans)
    sp = demo_text.split_sentences(demo_text.load_transcripts(a.transcripts), ids, texts, a.seed,
                                   a.n_test, a.n_dev)
    full = sp  # the extra text stays clear of every test and dev sentence, --limit or not
    if a.limit:
        sp = {k: (v[:a.limit] if isinstance(v, list) else v) for k, v in sp.items()}
    os.makedirs(a.out, exist_ok=True)
    failed = open(os.path.join(a.out, 'failed.txt'), 'w')  # this run's failures (retried)
    stats = {'seed': a.seed, 'jobs': a.jobs, 'hours_target': a.hours,
             'voices': {'train': train_v, 'test': held_v},
             'sentences': {k: len(sp[k]) for k in ('train', 'dev', 'test')},
             'rejected_sentences': sp['rejected'], 'flite_share': a.flite_share}
    res = {}
    # test: every test sentence by every held-out voice; dev: one training voice per sentence
    tj = [make_job(a.out, 'test', v, s, seeded(a.seed, 'test', v, s['id']))
          for s in sp['test'] for v in held_v]
    dj = []
    for s in sp['dev']:
        r = seeded(a.seed, 'dev', s['id'])
        v = pick_voice(r, train_v)
        dj.append(make_job(a.out, 'dev', v, s, r))
    res['test'] = run_jobs(tj, env, a.jobs, failed)
    res['dev'] = run_jobs(dj, env, a.jobs, failed)
    # train: rounds; each round gives every sentence one more voice it has not had yet
    res['train'], secs, rnd = [], 0.0, 0
    used = {s['id']: set() for s in sp['train']}
    order = list(sp['train'])
    lj_hours = a.hours - a.extra_hours
    # train only (dev keeps ENGINE_WEIGHTS); rounded so that the default draws as it always did
    tw = {'espeak': round(1 - a.flite_share, 12), 'flite': a.flite_share}
    while secs < lj_hours * 3600 and rnd < len(train_v) and order:
        rj = []
        seeded(a.seed, 'order', rnd).shuffle(order)
        for s in order:
            r = seeded(a.seed, 'train', rnd, s['id'])
            v = pick_voice(r, [x for x in train_v if x not in used[s['id']]], tw)
            used[s['id']].add(v)
            rj.append(make_job(a.out, 'train', v, s, r))
        # stop within a round once the hours are there
        secs = synth_until(rj, lj_hours * 3600, secs, res['train'], f'round {rnd}', env, a, failed,
                           t0)
        rnd += 1
    if a.extra_hours > 0:
        plan, done = extra_plan(a, full, texts), []

        def extra_jobs():  # made chunk by chunk: most of the plan is never synthesised
            for s in plan:
                r = seeded(a.seed, 'extra', s['id'])
                yield make_job(a.out, 'train', pick_voice(r, train_v, tw), s, r)
        xs = synth_until(extra_jobs(), a.extra_hours * 3600, 0.0, done, 'extra', env, a, failed,
                         t0)
        res['train'] += done
        stats['extra'] = {'file': os.path.basename(a.extra), 'usable': len(plan),
                          'sentences': len(done), 'hours': round(xs / 3600, 4)}
    wall = time.time() - t0
    for split in ('train', 'dev', 'test'):
        with open(os.path.join(a.out, split + '.jsonl'), 'w') as f:
            for j in res[split]:
                f.write(record(j, a.out))
    hours = {}
    for split in ('train', 'dev', 'test'):
        h = {'utterances': len(res[split]), 'hours': 0.0, 'engine': {}, 'voice': {}}
        for j in res[split]:
            x = j['dur'] / 3600
            h['hours'] += x
            h['engine'][j['engine']] = h['engine'].get(j['engine'], 0) + x
            h['voice'][j['voice']] = h['voice'].get(j['voice'], 0) + x
        h = json.loads(json.dumps(h), parse_float=lambda f: round(float(f), 4))
        hours[split] = h
    failed.close()
    nfail = sum(1 for _ in open(os.path.join(a.out, 'failed.txt')))
    # throughput of the engines themselves, from the utterances synthesised in this run
    speed = {}
    for j in res['train'] + res['dev'] + res['test']:
        if 'synth_s' in j:
            e = speed.setdefault(j['engine'], {'utterances': 0, 'audio_s': 0.0, 'synth_s': 0.0})
            e['utterances'] += 1
            e['audio_s'] += j['dur']
            e['synth_s'] += j['synth_s']
    for e in speed.values():
        e['audio_s_per_process_s'] = round(e['audio_s'] / max(e['synth_s'], 1e-9), 1)
        e['audio_s'], e['synth_s'] = round(e['audio_s'], 1), round(e['synth_s'], 1)
    stats.update({'hours': hours, 'speed': speed, 'train_rounds': rnd, 'failed': nfail,
                  'wall_s': round(wall, 1)})
    with open(os.path.join(a.out, 'stats.json'), 'w') as f:
        json.dump(stats, f, indent=1)
    print(f"done in {wall:.0f} s: train {hours['train']['hours']:.2f} h, dev "
          f"{hours['dev']['hours']:.2f} h, test {hours['test']['hours']:.2f} h, {nfail} failed")
    return 0


def resample_16k(src, dst):
    """16-bit mono WAV to 16 kHz: scipy's polyphase resampler (a Kaiser-windowed sinc low-pass
    at the lower Nyquist frequency, 22050 -> 16000 as up 320 / down 441), or sox's when scipy is
    missing. Runs here, not on the GPU machine."""
    try:
        import numpy as np
        from scipy.signal import resample_poly
    except ImportError:
        subprocess.run(['sox', src, '-r', '16000', '-b', '16', '-c', '1', dst], check=True)
        return
    from math import gcd
    with wave.open(src) as w:
        sr = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype='<i2').astype(np.float64)
    g = gcd(16000, sr)
    y = resample_poly(x, 16000 // g, sr // g)
    y = np.clip(np.round(y), -32768, 32767).astype('<i2')
    with wave.open(dst, 'wb') as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(y.tobytes())


def examples(a):
    """4 clips of 2-4 s, 16 kHz: held-out voices speaking short test sentences; trans.txt."""
    env = load_env(a.engines_env)
    _, held = voices(env)
    ids, texts = demo_text.load_real(a.real_scp, a.real_trans)
    sp = demo_text.split_sentences(demo_text.load_transcripts(a.transcripts), ids, texts, a.seed,
                                   a.n_test, a.n_dev)
    short = sorted((s for s in sp['test'] if 5 <= len(s['target'].split()) <= 8),
                   key=lambda s: s['id'])
    os.makedirs(a.examples, exist_ok=True)
    lines, si = [], 0
    for v in held[-1:] + held[:3]:  # flite's held-out voice first, then three espeak ones
        while si < len(short):
            s = short[si]
            si += 1
            key = f'{slug(v)}-{s["id"]}'
            raw = os.path.join(a.examples, key + '.raw.wav')
            argv, _ = job_args(v, s['text'], raw, seeded(a.seed, 'example', v, s['id']))
            if v.startswith('espeak:'):  # a steady rate: the clip length is the text's
                argv[argv.index('-s') + 1] = '165'
            j = synth({'wav': raw, 'argv': argv}, env)
            if 'error' in j or not 2.0 <= j['dur'] <= 4.0:
                if os.path.exists(raw):
                    os.remove(raw)
                continue
            dst = os.path.join(a.examples, key + '.wav')
            if j['sr'] == 16000:
                os.replace(raw, dst)
            else:
                resample_16k(raw, dst)
                os.remove(raw)
            lines.append(f'{key} {s["target"]}\n')
            print(f'{dst}: {j["dur"]:.2f} s, {v}', flush=True)
            break
    with open(os.path.join(a.examples, 'trans.txt'), 'w') as f:
        f.writelines(lines)
    return 0 if len(lines) == 4 else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--out', help='corpus folder')
    ap.add_argument('--examples', help='write 4 example clips + trans.txt here instead')
    ap.add_argument('--jobs', type=int, default=os.cpu_count())
    ap.add_argument('--hours', type=float, default=100.0, help='train hours to reach')
    ap.add_argument('--seed', type=int, default=22)
    ap.add_argument('--engines-env', help="tools/demo_engines.sh's DIR/env.sh")
    ap.add_argument('--limit', type=int, default=0, help='at most K sentences per split')
    ap.add_argument('--chunk', type=int, default=2000, help='train jobs between hour checks')
    ap.add_argument('--n-test', type=int, default=demo_text.N_TEST, help='test sentences')
    ap.add_argument('--n-dev', type=int, default=demo_text.N_DEV, help='dev sentences')
    ap.add_argument('--transcripts', help='id<TAB>text lines (default: LJSpeech, see below)')
    ap.add_argument('--real-scp', help="real-speech test wav.scp: its lj- ids go to test")
    ap.add_argument('--real-trans', help='real-speech test trans.txt: its texts never train')
    ap.add_argument('--flite-share', type=float, default=ENGINE_WEIGHTS['flite'],
                    help="the chance that a train utterance's voice is flite's (dev: always 0.3)")
    ap.add_argument('--extra-hours', type=float, default=0.0,
                    help='train hours of extra text (WordNet), out of --hours')
    ap.add_argument('--extra', help='id<TAB>text lines of extra text (default: text/wordnet.tsv '
                    'beside --engines-env)')
    a = ap.parse_args(argv)
    if bool(a.out) == bool(a.examples):
        ap.error('give one of --out DIR or --examples OUT')
    if not 0 <= a.extra_hours <= a.hours:
        ap.error('--extra-hours must be between 0 and --hours')
    if not 0 <= a.flite_share <= 1:
        ap.error('--flite-share must be between 0 and 1')
    resolve_text(a)
    return examples(a) if a.examples else build(a)


if __name__ == '__main__':
    sys.exit(main())
