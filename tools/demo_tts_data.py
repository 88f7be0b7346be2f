#!/usr/bin/env python3
"""Synthesises the training data of hark's demo voice (issue 22 part 3, docs/demo-voice.md): one
espeak-ng voice speaking LJSpeech transcripts, as HiFi-GAN V3 log-mels and hark's symbol ids, for
tools/train_demo_tts.py. Tested by tests/text/test_tts_text.c (the ids against hark's front end)
and tests/tools/test_demo_tts.c (the whole pipeline at toy size).

  tools/demo_tts_data.py --out DIR --jobs N [--hours H] [--engines-env ENV/env.sh] [--limit K]
  tools/demo_tts_data.py --ids-tsv FILE      (every usable sentence: key<TAB>ids<TAB>text)
  tools/demo_tts_data.py --text-file FILE --split test [--limit K]   (KEY<TAB>TEXT lines)

Sentences: tools/demo_text.py's split (the recogniser's): train sentences train the voice, test
sentences never do (the round trip speaks them). A sentence is kept when the recogniser's filter
keeps it and every character is ASCII or one of the few typographic marks whose transliteration
is listed below, so that the ids computed here are exactly those hark's C front end
(src/text/tts_text.c, DLE's english_cleaners) gives for the same text.

The engine speaks the cleaned text (lower case, whitespace collapsed): what the model sees is
what was said. The WAV (22,050 Hz, the vocoder's rate) is trimmed to its sound plus a margin,
peak-normalised to 0.95 as HiFi-GAN's training data was (meldataset.py: normalize(audio) * 0.95),
and turned into the HiFi-GAN mel (tools/ref_features.py's tts_mel_hifigan_batch: n_fft 1024,
hop 256, win 1024, 80 slaney mels 0-8000 Hz, reflect pad 384, magnitude with 1e-9,
log(clamp(x, 1e-5)); checked against hark's own `hark features --kind tts-mel`).

DIR/SPLIT.pt: {'keys', 'texts' (cleaned), 'ids' [int16 tensors], 'mels' [float16 (T, 80)],
'voice', 'settings'}; DIR/stats.json: hours, utterances, wall time. WAVs are written under
DIR/wav/ and kept (a second run measures them instead of synthesising again).
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
import time
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np  # noqa: E402

import demo_data  # noqa: E402
import demo_text  # noqa: E402

# the one voice: espeak-ng's default US English voice at its default rate (175 wpm) and pitch (50)
VOICE = 'en-us'
RATE_WPM = 175
PITCH = 50
SR = 22050
MARGIN_BEFORE, MARGIN_AFTER = 0.05, 0.10  # seconds kept around the sound

# DLE's symbols (fastspeech/text_norm/symbols.py as hark's src/text/tts_text.c lists them): the
# ids of the characters; '@' ARPAbet symbols follow (never produced here)
CHARS = "_-!'(),.:;? ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
CHAR_ID = {c: i for i, c in enumerate(CHARS)}
# the non-ASCII characters demo_text lets through that are transliterated here, as unidecode
# (and hark's punct()) reads them; a sentence with any other non-ASCII character is dropped
TRANSLIT = {'\u2018': "'", '\u2019': "'", '\u201c': '"', '\u201d': '"', '\u2014': '--',
            '\u2013': '-', '\u00a0': ' '}


def clean(text):
    """DLE's english_cleaners for the sentences demo_text keeps (no digits, no abbreviation,
    no brace): transliteration, lower case, whitespace runs to one space. None when the text
    holds a character this module does not transliterate."""
    t = ''.join(TRANSLIT.get(c, c) for c in text)
    if any(ord(c) > 127 for c in t):
        return None
    return re.sub(r'\s+', ' ', t.lower())


def text_ids(cleaned):
    """Symbol ids of a cleaned text: characters outside the symbol set are dropped."""
    return [CHAR_ID[c] for c in cleaned if c in CHAR_ID]


def tts_sentences(split, limit=0, **kw):
    """[{id, text (raw transcript), clean, ids}] of demo_text's split (train / dev / test) that
    this module can clean; the raw transcript is kept for hark (it cleans it itself)."""
    raw = dict(demo_text.load_transcripts(kw.get('transcripts') or demo_text.TRANSCRIPTS))
    ids, texts = demo_text.load_real(kw.get('real_scp') or demo_text.REAL_SCP,
                                     kw.get('real_trans') or demo_text.REAL_TRANS)
    sp = demo_text.split_sentences(list(raw.items()), ids, texts)
    out = []
    for s in sp[split]:
        c = clean(raw[s['id']])
        if c is None or not any(i >= 12 for i in text_ids(c)):
            continue
        out.append({'id': s['id'], 'text': raw[s['id']], 'clean': c, 'ids': text_ids(c),
                    'target': s['target']})
        if limit and len(out) >= limit:
            break
    return out


def espeak_argv(text, wav):
    # the text after '--': a leading '-' is not an option; quotes are not spoken anyway
    return ['espeak-ng', '-v', VOICE, '-s', str(RATE_WPM), '-p', str(PITCH), '-w', wav, '--',
            text.replace('"', '').strip()]


def synth(job, env):
    """One utterance: the WAV at job['wav'] (kept when already there); returns job or raises."""
    if os.path.exists(job['wav']):
        try:
            demo_data.wav_info(job['wav'])
            return job
        except Exception:  # a partial file from an interrupted run
            os.remove(job['wav'])
    os.makedirs(os.path.dirname(job['wav']), exist_ok=True)
    tmp = job['wav'] + '.part.wav'
    r = subprocess.run(espeak_argv(job['clean'], tmp), env=env, capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{job['id']}: espeak-ng exit {r.returncode}: "
                           f"{r.stderr.decode(errors='replace')[-200:]}")
    demo_data.wav_info(tmp)
    os.replace(tmp, job['wav'])
    return job


def synth_prepare(job, env):
    """synth, then the WAV read and prepared (in the worker thread: numpy releases the GIL)."""
    synth(job, env)
    x, sr = read_wav(job['wav'])
    job['audio'] = prepare_audio(x, sr)
    job['sr_engine'] = sr
    return job


def read_wav(path):
    """(float64 samples in [-1, 1), sample rate) of a 16-bit mono WAV."""
    with wave.open(path) as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise ValueError(f'{path}: not 16-bit mono')
        sr = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype='<i2').astype(np.float64) / 32768.0
    return x, sr


def prepare_audio(x, sr):
    """22,050 Hz, trimmed to the sound (|x| > 1% of the peak) plus the margins, peak 0.95;
    float32. Another rate is resampled with scipy's polyphase filter."""
    if sr != SR:
        from math import gcd
        from scipy.signal import resample_poly
        g = gcd(SR, sr)
        x = resample_poly(x, SR // g, sr // g)
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak <= 0:
        raise ValueError('silent audio')
    loud = np.nonzero(np.abs(x) > 0.01 * peak)[0]
    a = max(0, loud[0] - int(MARGIN_BEFORE * SR))
    b = min(x.size, loud[-1] + 1 + int(MARGIN_AFTER * SR))
    x = x[a:b]
    return (x / peak * 0.95).astype(np.float32)


def mels_of(audios, device):
    """HiFi-GAN log-mels (T, 80) float16 of float32 waveforms, one at a time (each with its own
    reflect padding, as the vocoder's recipe pads one utterance): T = N // 256."""
    import torch
    import ref_features
    out = []
    with torch.no_grad():
        for x in audios:
            y = torch.from_numpy(x).to(device).reshape(1, -1)
            m = ref_features.tts_mel_hifigan_batch(y)[0].float().cpu()  # (80, T)
            out.append(m.t().contiguous().to(torch.float16))
    return out


def build(a):
    import torch
    t0 = time.time()
    env = demo_data.load_env(a.engines_env)
    kw = dict(transcripts=a.transcripts, real_scp=a.real_scp, real_trans=a.real_trans)
    os.makedirs(a.out, exist_ok=True)
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    stats = {'voice': f'espeak-ng {VOICE} -s {RATE_WPM} -p {PITCH}', 'splits': {}}
    for split in ('train', 'test'):
        sents = tts_sentences(split, a.limit if split == 'train' else (a.limit_test or a.limit),
                              **kw)
        budget = a.hours * 3600 if split == 'train' else a.test_hours * 3600
        # ~0.068 s per character at 175 wpm: synthesise in chunks until the budget is met
        done, secs, k = [], 0.0, 0
        while k < len(sents) and secs < budget:
            chunk = sents[k:k + a.chunk]
            k += len(chunk)
            jobs = [dict(s, wav=os.path.join(a.out, 'wav', split, s['id'] + '.wav'))
                    for s in chunk]
            with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
                futs = [ex.submit(synth_prepare, j, env) for j in jobs]
                for f in futs:
                    try:
                        j = f.result()
                    except Exception as e:  # logged, never fatal
                        print(f'failed: {e}', file=sys.stderr)
                        continue
                    secs += j['audio'].size / SR
                    done.append(j)
                    if secs >= budget:
                        break
            print(f'{split}: {len(done)} utterances, {secs / 3600:.2f} h, '
                  f'{time.time() - t0:.0f} s', flush=True)
        mels = mels_of([j['audio'] for j in done], device)
        keep = [i for i, j in enumerate(done) if mels[i].shape[0] >= len(j['ids'])]
        data = {'keys': [done[i]['id'] for i in keep], 'texts': [done[i]['clean'] for i in keep],
                'raw': [done[i]['text'] for i in keep],
                'targets': [done[i]['target'] for i in keep],
                'ids': [torch.tensor(done[i]['ids'], dtype=torch.int16) for i in keep],
                'mels': [mels[i] for i in keep], 'voice': stats['voice'], 'sr': SR,
                'settings': {'voice': VOICE, 'rate': RATE_WPM, 'pitch': PITCH,
                             'margin_s': [MARGIN_BEFORE, MARGIN_AFTER], 'peak': 0.95}}
        torch.save(data, os.path.join(a.out, split + '.pt'))
        frames = sum(m.shape[0] for m in data['mels'])
        stats['splits'][split] = {'utterances': len(keep), 'hours': round(frames * 256 / SR / 3600, 4),
                                  'frames': frames, 'symbols': sum(len(x) for x in data['ids']),
                                  'engine_rates': sorted({done[i]['sr_engine'] for i in keep}),
                                  'dropped_short': len(done) - len(keep)}
    stats['wall_s'] = round(time.time() - t0, 1)
    with open(os.path.join(a.out, 'stats.json'), 'w') as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats))
    return 0


def write_ids_tsv(a):
    """Every sentence of every split that this module keeps: key<TAB>ids<TAB>raw text (TAB and
    newline escaped), the file tests/text/test_tts_text.c compares with hark's front end."""
    kw = dict(transcripts=a.transcripts, real_scp=a.real_scp, real_trans=a.real_trans)
    n = 0
    with open(a.ids_tsv, 'w', encoding='utf-8') as f:
        for split in ('train', 'dev', 'test'):
            for s in tts_sentences(split, **kw):
                esc = s['text'].replace('\\', '\\\\').replace('\t', '\\t').replace('\n', '\\n')
                f.write(f"{s['id']}\t{' '.join(map(str, s['ids']))}\t{esc}\n")
                n += 1
    print(f'wrote {a.ids_tsv}: {n} sentences')
    return 0


def write_text_file(a):
    """KEY<TAB>raw text lines of a split (hark speak --text-file) and KEY target lines (the
    scorer's references) beside it as FILE.trans."""
    kw = dict(transcripts=a.transcripts, real_scp=a.real_scp, real_trans=a.real_trans)
    sents = tts_sentences(a.split, a.limit, **kw)
    with open(a.text_file, 'w', encoding='utf-8') as f, \
            open(a.text_file + '.trans', 'w', encoding='utf-8') as g:
        for s in sents:
            f.write(f"{s['id']}\t{' '.join(s['text'].split())}\n")
            g.write(f"{s['id']} {s['target']}\n")
    print(f'wrote {a.text_file}: {len(sents)} {a.split} sentences')
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--out', help='data folder')
    ap.add_argument('--ids-tsv', help='write the ids of every usable sentence here instead')
    ap.add_argument('--text-file', help='write KEY<TAB>TEXT lines of --split here instead')
    ap.add_argument('--split', default='test', choices=['train', 'dev', 'test'])
    ap.add_argument('--jobs', type=int, default=os.cpu_count())
    ap.add_argument('--hours', type=float, default=4.0, help='train hours (after trimming)')
    ap.add_argument('--test-hours', type=float, default=0.1, help='test hours (loss check)')
    ap.add_argument('--limit', type=int, default=0, help='at most K sentences per split')
    ap.add_argument('--limit-test', type=int, default=0, help='at most K test sentences')
    ap.add_argument('--chunk', type=int, default=1000, help='utterances between hour checks')
    ap.add_argument('--engines-env', help="tools/demo_engines.sh's DIR/env.sh")
    ap.add_argument('--transcripts')
    ap.add_argument('--real-scp')
    ap.add_argument('--real-trans')
    a = ap.parse_args(argv)
    if sum(bool(x) for x in (a.out, a.ids_tsv, a.text_file)) != 1:
        ap.error('give one of --out, --ids-tsv, --text-file')
    demo_data.resolve_text(a)
    if a.ids_tsv:
        return write_ids_tsv(a)
    if a.text_file:
        return write_text_file(a)
    return build(a)


if __name__ == '__main__':
    sys.exit(main())
