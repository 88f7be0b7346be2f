#!/usr/bin/env python3
"""Checks the demo voice's training tools against hark (run by tests/tools/test_demo_tts.c):

1. layout: tools/train_demo_tts.py's FastSpeech (seeded weights, two heads, awkward widths)
   exported in DLE's layout, converted by tools/convert_fastspeech.py (float32, and float16
   against the same weights rounded), run by `hark speak --dump-dir`: the ids are
   tools/demo_tts_data.py's, the rounded durations are the PyTorch model's, the mel is within
   1e-5 of its peak — so what the trainer learns is what hark computes;
2. pipeline (when espeak-ng is there: ENGINES_ENV, an env.sh of tools/demo_engines.sh): a toy
   run of the whole recipe — data (a few sentences), aligner, FastSpeech, export, convert —
   ending in a WAV from `hark speak`, and tools/demo_tts_roundtrip.py scoring it.

Usage: demo_tts_check.py HARK TMPDIR [ENGINES_ENV]   exit 0 = pass, 1 = fail
"""
import argparse
import os
import shutil
import subprocess
import sys
import wave

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
TOOLS = os.path.join(ROOT, 'tools')
sys.path.insert(0, TOOLS)
import numpy as np  # noqa: E402
import torch  # noqa: E402

import demo_tts_data  # noqa: E402
import train_demo_tts  # noqa: E402

PY = sys.executable
failures = []
TEXT = 'Turn left, then right; the quick brown fox jumped over "lazy" dogs — twice!'


def check(cond, what):
    print(('ok    ' if cond else 'FAIL  ') + what, flush=True)
    if not cond:
        failures.append(what)


def run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-2000:])
    return r


def layout(hark, tmp):
    h = dict(train_demo_tts.SIZES['tiny'], d_model=48, phoneme_side_n_layer=2,
             phoneme_side_head=2, phoneme_side_conv1d_filter_size=40,
             phoneme_side_output_size=48, mel_side_n_layer=1, mel_side_head=2,
             mel_side_conv1d_filter_size=56, mel_side_output_size=48,
             duration_predictor_filter_size=24, max_seq_len=300)
    torch.manual_seed(5)
    m = train_demo_tts.FastSpeech(h)
    with torch.no_grad():  # non-trivial layer norms and about 4 frames per symbol
        for name, p in m.named_parameters():
            if 'layer_norm' in name:
                p.add_(0.1 * torch.randn_like(p))
        m.length_regulator.duration_predictor.linear_layer.weight.mul_(0.2)
        m.length_regulator.duration_predictor.linear_layer.bias.fill_(float(np.log(5.0)))
    m.eval()
    exp = os.path.join(tmp, 'exp')
    os.makedirs(exp, exist_ok=True)
    torch.save({'step': 7, 'seconds': 0.0, 'hparams': h, 'model': m.state_dict(),
                'optimizer': {}}, os.path.join(exp, 'resume.pt'))
    train_demo_tts.export(argparse.Namespace(exp=exp))
    ck = torch.load(os.path.join(exp, 'fastspeech.pt'))
    check(set(ck) == {'step', 'model'} and all(k.startswith('module.') for k in ck['model']),
          "export: {'step', 'model'} with DataParallel's module. prefix")
    repo = os.path.join(tmp, 'repo')
    r = run([PY, os.path.join(TOOLS, 'convert_hifigan.py'), '--random', '1', '--config', 'v3',
             '--output', os.path.join(repo, 'voc')])
    check(r.returncode == 0, 'convert_hifigan.py --random')
    ids = demo_tts_data.text_ids(demo_tts_data.clean(TEXT))
    with torch.no_grad():
        ref_mel, ref_dur = m.infer(torch.tensor(ids)[None])
    ref_mel = ref_mel[0].numpy()
    for dtype in ('float32', 'float16'):
        r = run([PY, os.path.join(TOOLS, 'convert_fastspeech.py'), '--checkpoint',
                 os.path.join(exp, 'fastspeech.pt'), '--config',
                 os.path.join(exp, 'fastspeech.yaml'), '--output', os.path.join(repo, 'fs'),
                 '--vocoder', 'voc', '--dtype', dtype])
        check(r.returncode == 0, f'convert_fastspeech.py --dtype {dtype}')
        if dtype == 'float16':  # the reference with the weights as stored
            m16 = train_demo_tts.FastSpeech(h)
            m16.load_state_dict({k: (v.half().float() if v.dim() >= 2 else v)
                                 for k, v in m.state_dict().items()})
            m16.eval()
            with torch.no_grad():
                ref_mel, ref_dur = m16.infer(torch.tensor(ids)[None])
            ref_mel = ref_mel[0].numpy()
        dump = os.path.join(tmp, 'dump-' + dtype)
        r = run([hark, 'speak', '--model', os.path.join(repo, 'fs'), TEXT, '-o',
                 os.path.join(tmp, 'x.wav'), '--dump-dir', dump])
        check(r.returncode == 0, f'hark speak ({dtype})')
        if r.returncode:
            continue
        hid = np.load(os.path.join(dump, 'ids.npy')).reshape(-1).astype(np.int64).tolist()
        check(hid == ids, f'{dtype}: hark\'s ids are demo_tts_data.py\'s ({len(ids)} symbols)')
        hd = np.load(os.path.join(dump, 'dur_rounded.npy')).reshape(-1).astype(np.int64)
        check(np.array_equal(hd, ref_dur.numpy()),
              f'{dtype}: durations equal ({int(hd.sum())} frames)')
        hm = np.load(os.path.join(dump, 'mel.npy')).reshape(-1, h['n_mels'])
        if hm.shape == ref_mel.shape:
            rel = float(np.abs(hm - ref_mel).max() / np.abs(ref_mel).max())
            check(rel <= 1e-5, f'{dtype}: mel within 1e-5 of the PyTorch model ({rel:.2e})')
        else:
            check(False, f'{dtype}: mel shape {hm.shape} vs {ref_mel.shape}')


def pipeline(hark, tmp, env):
    data, exp, repo = (os.path.join(tmp, x) for x in ('data', 'exp2', 'repo2'))
    r = run([PY, os.path.join(TOOLS, 'demo_tts_data.py'), '--out', data, '--jobs', '2',
             '--limit', '6', '--limit-test', '2', '--engines-env', env])
    check(r.returncode == 0, 'demo_tts_data.py: 6 + 2 sentences')
    if r.returncode:
        return
    d = torch.load(os.path.join(data, 'train.pt'))
    ok = len(d['keys']) == 6 and all(
        m.dtype == torch.float16 and m.shape[1] == 80 and m.shape[0] > len(i)
        for m, i in zip(d['mels'], d['ids']))
    check(ok, 'train.pt: 6 utterances, (T, 80) float16 mels longer than their ids')
    peak = max(float(m.float().max()) for m in d['mels'])
    check(-2.0 < peak < 4.0, f'mel peak {peak:.2f} in the range of HiFi-GAN\'s training mels')
    r = run([PY, os.path.join(TOOLS, 'train_demo_tts.py'), 'train', '--data', data, '--exp', exp,
             '--size', 'tiny', '--minutes', '3', '--aligner-steps', '3', '--max-steps', '3',
             '--batch-frames', '3000', '--aligner-frames', '3000', '--cpu'])
    check(r.returncode == 0, 'train_demo_tts.py train (toy)')
    if r.returncode:
        return
    dd = torch.load(os.path.join(exp, 'durations.pt'))
    mm = dict(zip(d['keys'], d['mels']))
    ok = all(int(x.sum()) == mm[k].shape[0] and int(x.min()) >= 1
             for k, x in zip(dd['keys'], dd['durations']) if k in mm)
    check(ok, 'durations: at least one frame per symbol, summing to the frames')
    r = run([PY, os.path.join(TOOLS, 'train_demo_tts.py'), 'train', '--data', data, '--exp', exp,
             '--size', 'tiny', '--minutes', '3', '--max-steps', '5', '--resume', '--cpu'])
    check(r.returncode == 0 and '"phase": "resume", "step": 3' in r.stdout,
          'a second call resumes at step 3')
    opts = torch.load(os.path.join(exp, 'resume.pt'))['opts'] if r.returncode == 0 else {}
    check(opts == {'lr': 1e-3, 'warmup': 400, 'batch_frames': 3000},
          f'the resumed call keeps the run\'s --batch-frames 3000 ({opts})')
    # what tools/demo_device_together.sh brings back (float16, no sinusoid tables) and `fill`
    fs = torch.load(os.path.join(exp, 'fastspeech.pt'))
    half = os.path.join(tmp, 'half.pt')
    r = run([PY, os.path.join(TOOLS, 'train_demo_tts.py'), 'half', '--exp', exp, '--out', half])
    hk = torch.load(half)['model'] if r.returncode == 0 else {}
    check(hk and all(v.dtype == torch.float16 for v in hk.values()) and
          set(fs['model']) - set(hk) == {k for k in fs['model'] if k.endswith('position.weight')},
          'half: float16, the two sinusoid tables left out')
    fexp = os.path.join(tmp, 'exp_fill')
    os.makedirs(fexp, exist_ok=True)
    shutil.copy(os.path.join(exp, 'fastspeech.yaml'), fexp)
    r = run([PY, os.path.join(TOOLS, 'train_demo_tts.py'), 'fill', '--exp', fexp, '--half', half])
    ok = r.returncode == 0
    if ok:
        ff = torch.load(os.path.join(fexp, 'fastspeech.pt'))['model']
        ok = set(ff) == set(fs['model']) and all(
            torch.equal(ff[k], fs['model'][k]) if k.endswith('position.weight') else
            torch.equal(ff[k], fs['model'][k].half().float()) for k in ff)
    check(ok, 'fill: the float16 export without its tables gives back every tensor')
    r = run([PY, os.path.join(TOOLS, 'train_demo_tts.py'), 'fill', '--exp', fexp, '--half',
             os.path.join(exp, 'resume.pt')])
    check(r.returncode != 0, 'fill refuses a file that is not such an export')
    r = run([PY, os.path.join(TOOLS, 'convert_hifigan.py'), '--random', '1', '--config', 'v3',
             '--output', os.path.join(repo, 'demo-en-tts', 'vocoder')])
    r2 = run([PY, os.path.join(TOOLS, 'convert_fastspeech.py'), '--checkpoint',
              os.path.join(exp, 'fastspeech.pt'), '--config', os.path.join(exp, 'fastspeech.yaml'),
              '--output', os.path.join(repo, 'demo-en-tts'), '--vocoder', 'demo-en-tts/vocoder',
              '--dtype', 'float16'])
    check(r.returncode == 0 and r2.returncode == 0, 'converted, the vocoder inside the entry')
    wav = os.path.join(tmp, 'toy.wav')
    r = run([hark, 'speak', '--model', os.path.join(repo, 'demo-en-tts'), TEXT, '-o', wav])
    ok = r.returncode == 0 and os.path.exists(wav)
    if ok:
        with wave.open(wav) as w:
            ok = w.getframerate() == 22050 and w.getnframes() > 0
    check(ok, 'hark speak: a 22,050 Hz WAV from the toy voice')
    asr = os.path.join(ROOT, 'models', 'demo-en-asr')
    if os.path.isdir(asr):
        sf = os.path.join(tmp, 'sentences.tsv')
        with open(sf, 'w') as f:
            f.write('a\tThe boat sailed home.\nb\tIt was a cold night.\n')
        r = run([PY, os.path.join(TOOLS, 'demo_tts_roundtrip.py'), '--hark', hark, '--model',
                 os.path.join(repo, 'demo-en-tts'), '--asr', asr, '--sentences', sf])
        check(r.returncode == 0 and 'round trip, 2 sentences: WER' in r.stdout,
              'demo_tts_roundtrip.py scores the toy voice (its WER means nothing)')


def main():
    hark, tmp = sys.argv[1], sys.argv[2]
    env = sys.argv[3] if len(sys.argv) > 3 else ''
    layout(hark, tmp)
    if env and os.path.exists(env):
        pipeline(hark, tmp, env)
    else:
        print('skip  pipeline: no espeak-ng (tools/demo_engines.sh .demo makes it)')
    if failures:
        print(f'{len(failures)} checks failed')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
