#!/usr/bin/env python3
"""Checks of tools/train_demo.py's pieces (run by tests/model/wenet/test_demo_train.c from the
repository root):
  fbank HARK_BIN   tools/demo_fbank.py's GPU-ready fbank against `hark features --kind fbank` on
                   the bundled 16 kHz example (the features the demo model trains on are hark's)
  resample         train_demo.resample against scipy's resample_poly (speed perturbation)
  edges            train_demo.edge_silence: the words kept sample for sample, the silence around
                   them redrawn within its bounds, nothing drawn when it is off
  dither           demo_fbank.fbank's dither per utterance (--undithered-p): a 0 gives exactly the
                   undithered features (digital silence at the log floor), all 1s the number's
  vtlp             demo_fbank.warp_banks (--vtlp-p): factor 1 gives the filters back exactly; a
                   tone at f warped by alpha peaks in the mel bin of a tone at alpha f; per-
                   utterance filters in one batch give each utterance's own features
  train HARK_BIN   two CPU training steps on the bundled examples, export, convert, and hark
                   loads and runs the result (needs WeNet's package in .ext)
  init HARK_BIN    a run started from the shipped models/demo-en-asr (--init) at learning rate 0
                   with a --total-minutes schedule, resumed once: export and convert give back the
                   shipped tensors exactly, and hark transcribes the 16 kHz example to its text
Exit 0 = pass; 77 = skipped (the reason on stdout)."""
import json, os, subprocess, sys, tempfile, wave

import numpy as np
import torch

sys.path.insert(0, "tools")
import demo_fbank  # noqa: E402
import train_demo  # noqa: E402

EX = "examples/demo-en"
WAV16 = os.path.join(EX, "flite-rms-LJ041-0026.wav")


def clip16():
    """WAV16's samples, float32 in int16 scale"""
    w = wave.open(WAV16)
    assert w.getframerate() == 16000
    return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32)


def fbank(hark):
    tmp = tempfile.mkdtemp(prefix="hark-demo-fbank-")
    npy = os.path.join(tmp, "f.npy")
    subprocess.run([hark, "features", WAV16, "--kind", "fbank", "--npy", npy], check=True,
                   capture_output=True)
    ref = np.load(npy)
    x = clip16()
    f, nf = demo_fbank.fbank(torch.from_numpy(x)[None], torch.tensor([len(x)]),
                             demo_fbank.mel_banks(), demo_fbank.povey())
    got = f[0].numpy()
    print("frames", ref.shape, got.shape, int(nf[0]))
    assert got.shape == ref.shape and int(nf[0]) == ref.shape[0]
    err = float(np.abs(got - ref).max())
    print("max abs error (log mel) %.2e" % err)
    assert err < 2e-3, err


def resample():
    from scipy.signal import resample_poly
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 7001)).astype(np.float32)
    for up, down in ((10, 11), (10, 9), (320, 441)):
        y = train_demo.resample(torch, torch.from_numpy(x), up, down).numpy()
        r = resample_poly(x, up, down, axis=1)
        assert abs(y.shape[1] - r.shape[1]) <= 1, (y.shape, r.shape)
        n = min(y.shape[1], r.shape[1])
        s = slice(100, n - 100)  # the edges pad differently
        rel = float(np.sqrt(((y[:, s] - r[:, s]) ** 2).mean() / (r[:, s] ** 2).mean()))
        print("resample %d/%d: rel rms vs scipy %.3f" % (up, down, rel))
        assert rel < 0.05, rel  # two different low-pass designs, white noise up to Nyquist


def edges():
    R = train_demo.RATE
    T = 3 * R
    tone = (8000 * np.sin(np.arange(R // 2) * 0.3)).astype(np.float32)
    w = np.zeros((3, T), np.float32)
    w[0, R // 2: R] = tone          # 0.5 s silence, 0.5 s tone, 0.5 s silence (len 1.5 s)
    w[1, :R // 2] = tone            # the tone at once, 1 s of silence after it
    w[2, 2 * R: 2 * R + R // 2] = tone  # the tone last: nothing after it but the buffer's end
    lens = torch.tensor([3 * R // 2, 3 * R // 2, T])
    g = torch.Generator().manual_seed(1)
    x = torch.from_numpy(w)
    y, nl = train_demo.edge_silence(torch, x, lens, g, p=0.0)
    assert y is x and nl is lens and torch.equal(g.get_state(),
                                                 torch.Generator().manual_seed(1).get_state())
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        y, nl = train_demo.edge_silence(torch, x, lens, g, p=1.0)
        for k in range(3):
            v = y[k].numpy()
            n = int(nl[k])
            loud = np.nonzero(np.abs(v) > 80)[0]
            assert len(loud) and loud[0] <= 0.3 * R + 1, (seed, k, loud[0])
            assert n - 1 - loud[-1] <= 0.4 * R + 1, (seed, k, n, loud[-1])
            assert not np.any(v[n:]), (seed, k)
            s = loud[0] - int(np.nonzero(np.abs(tone) > 80)[0][0])
            assert np.array_equal(v[s: s + len(tone)], tone), (seed, k)  # the words, untouched
        assert int(nl[2]) <= T
    print("edge_silence: 20 draws, the words kept, silences within 0.3 s / 0.4 s")


def dither():
    clip = clip16()
    T = len(clip)
    x = torch.zeros(3, T)
    x[1] = torch.from_numpy(clip)  # rows 0 and 2: digital silence
    x[2, T // 2:] = x[1, T // 2:]  # row 2: silence, then the clip's second half
    lens = torch.tensor([T, T, T])
    banks, win = demo_fbank.mel_banks(), demo_fbank.povey()
    plain, nf = demo_fbank.fbank(x, lens, banks, win)
    torch.manual_seed(3)
    some, _ = demo_fbank.fbank(x, lens, banks, win, dither=torch.tensor([0.0, 1.0, 0.0]))
    assert torch.equal(some[0], plain[0]) and torch.equal(some[2], plain[2])
    assert not torch.equal(some[1], plain[1])
    floor = float(np.log(demo_fbank.EPS))
    n = int(nf[0])
    assert torch.all(plain[0, :n] == floor), "digital silence is not at the log floor"
    assert float(some[1, :n].min()) > floor + 1  # dither lifts even the quietest frames
    torch.manual_seed(3)
    ones, _ = demo_fbank.fbank(x, lens, banks, win, dither=torch.ones(3))
    torch.manual_seed(3)
    one, _ = demo_fbank.fbank(x, lens, banks, win, dither=1.0)
    assert torch.equal(ones, one)
    print("dither per utterance: 0 gives the undithered features (silence at %.1f), 1 the "
          "number's" % floor)


def vtlp():
    banks = demo_fbank.mel_banks()
    same = demo_fbank.warp_banks(banks, torch.tensor([1.0, 1.0]))
    assert same.shape == (2,) + tuple(banks.shape) and torch.equal(same[0], banks)
    assert torch.equal(same[1], banks)
    win = demo_fbank.povey()
    t = np.arange(16000) / 16000.0

    def peak(freq, bk):
        x = torch.from_numpy((8000 * np.sin(2 * np.pi * freq * t)).astype(np.float32))[None]
        f, _ = demo_fbank.fbank(x, torch.tensor([16000]), bk, win)
        return f[0].mean(0)

    # the warp reaches up to 0.8 Nyquist / max(alpha, 1): tones well inside it
    tones = (300.0, 1000.0, 2500.0, 5000.0)
    unwarped = {freq: int(peak(freq, banks).argmax()) for freq in tones}
    for alpha in (0.9, 0.95, 1.07, 1.1):
        warped = demo_fbank.warp_banks(banks, torch.tensor([alpha]))[0]
        for freq in tones:
            got = int(peak(freq, warped).argmax())
            want = int(peak(freq * alpha, banks).argmax())
            assert abs(got - want) <= 1, (alpha, freq, got, want)
            if abs(alpha - 1) >= 0.1 and freq >= 1000:  # 10% is 2 bins or more up there
                assert got != unwarped[freq], (alpha, freq, got)
        assert torch.equal(warped[-1], banks[-1]), "Nyquist moved"
    # per utterance in one batch = each alone
    clip = torch.from_numpy(clip16())
    x = torch.stack([clip, clip.flip(0)])
    lens = torch.tensor([len(clip)] * 2)
    alphas = torch.tensor([0.92, 1.08])
    both, _ = demo_fbank.fbank(x, lens, demo_fbank.warp_banks(banks, alphas), win)
    for i in range(2):
        one, _ = demo_fbank.fbank(x[i:i + 1], lens[i:i + 1],
                                  demo_fbank.warp_banks(banks, alphas[i:i + 1])[0], win)
        assert torch.allclose(both[i], one[0], atol=1e-4), float((both[i] - one[0]).abs().max())
    plain, _ = demo_fbank.fbank(x, lens, banks, win)
    assert float((both - plain).abs().mean()) > 0.05
    print("warp_banks: 1 gives the filters back, a tone at f warped by alpha peaks where a tone "
          "at alpha f does, per-utterance filters in a batch match each alone")


def example_corpus():
    """a corpus of the bundled examples (train = dev) in a fresh folder: (folder, rows)"""
    if not os.path.isdir(".ext/wenet"):
        print("skip: WeNet's package is not in .ext/wenet")
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="hark-demo-train-")
    rows = []
    for line in open(os.path.join(EX, "trans.txt")):
        key, text = line.rstrip("\n").split(" ", 1)
        wav = os.path.abspath(os.path.join(EX, key + ".wav"))
        rows.append({"key": key, "wav": wav, "text": text})
    for split in ("train", "dev"):
        with open(os.path.join(tmp, split + ".jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return tmp, rows


def export_and_convert(tmp, exp, common):
    """final.pt rebuilt from resume.pt by `export`, converted as shipped (float16): the folder"""
    os.remove(os.path.join(exp, "final.pt"))
    subprocess.run([sys.executable, "tools/train_demo.py", "export", *common], check=True)
    model = os.path.join(tmp, "m")
    subprocess.run([sys.executable, "tools/convert_wenet.py", "--checkpoint", exp + "/final.pt",
                    "--config", exp + "/train.yaml", "--units", exp + "/units.txt", "--cmvn",
                    exp + "/global_cmvn", "--dtype", "float16", "--output", model], check=True)
    return model


def train(hark):
    tmp, _ = example_corpus()
    exp = os.path.join(tmp, "exp")
    py = sys.executable
    common = ["--data", tmp, "--exp", exp, "--device", "cpu", "--jobs", "1"]
    subprocess.run([py, "tools/train_demo.py", "train", *common, "--total-steps", "2",
                    "--max-samples", str(16000 * 20), "--log-every", "1", "--lr", "1e-3",
                    "--noise-p", "0.1", "--vtlp-p", "1"], check=True)
    # the resumed call names only --edge-p: the run keeps its --lr, --noise-p, --vtlp-p and
    # --max-samples
    out = subprocess.run([py, "tools/train_demo.py", "train", *common, "--total-steps", "3",
                          "--resume", "--edge-p", "1"], check=True, capture_output=True,
                         text=True).stdout
    print(out)
    opts = torch.load(os.path.join(exp, "resume.pt"))["opts"]
    assert opts == {"lr": 1e-3, "warmup": 400, "max_samples": 16000 * 20, "reverb_p": 0.15,
                    "noise_p": 0.1, "edge_p": 1.0, "undithered_p": 0.0, "vtlp_p": 1.0}, opts
    assert "--edge-p 1.0: the run had 0.0" in out, out
    model = export_and_convert(tmp, exp, common)
    hist = json.load(open(os.path.join(exp, "history.json")))
    assert [h["step"] for h in hist] == [2, 3], hist
    out = subprocess.run([hark, "transcribe", "--model", model, WAV16], check=True,
                         capture_output=True, text=True).stdout
    print("untrained model:", out.strip())
    assert out.startswith(WAV16)


def init(hark):
    from hark_entry import read_safetensors
    tmp, rows = example_corpus()
    exp = os.path.join(tmp, "exp")
    py = sys.executable
    common = ["--data", tmp, "--exp", exp, "--device", "cpu", "--jobs", "1"]
    run = [py, "tools/train_demo.py", "train", *common, "--max-samples", str(16000 * 20),
           "--lr", "0", "--resume"]
    subprocess.run([*run, "--init", "models/demo-en-asr", "--total-minutes", "0.03"], check=True)
    subprocess.run(run, check=True)  # resumed: the schedule's time is spent, no step
    r = torch.load(os.path.join(exp, "resume.pt"), map_location="cpu")
    hist = json.load(open(os.path.join(exp, "history.json")))
    assert hist[0] == {"init": "models/demo-en-asr"} and len(hist) == 3, hist
    assert r["total_minutes"] == 0.03 and r["seconds"] >= 0.03 * 60, r["seconds"]
    assert hist[1]["step"] >= 1 and hist[2]["step"] == hist[1]["step"], hist
    model = export_and_convert(tmp, exp, common)
    got, _ = read_safetensors(os.path.join(model, "1", "model.safetensors"))
    want, _ = read_safetensors("models/demo-en-asr/1/model.safetensors")
    assert sorted(got) == sorted(want), set(got) ^ set(want)
    bad = [k for k in want if not np.array_equal(got[k], want[k])]
    assert not bad, "tensors differ from the shipped model's: %s" % bad[:5]
    print("%d tensors equal the shipped model's after %d steps at learning rate 0" %
          (len(want), hist[1]["step"]))
    key = os.path.basename(WAV16)[:-4]
    out = subprocess.run([hark, "transcribe", "--model", model, WAV16], check=True,
                         capture_output=True, text=True).stdout
    ref = next(x["text"] for x in rows if x["key"] == key)
    assert out.strip() == WAV16 + " " + ref, out


mode = sys.argv[1]
{"fbank": lambda: fbank(sys.argv[2]), "resample": resample, "edges": edges, "dither": dither,
 "vtlp": vtlp, "train": lambda: train(sys.argv[2]), "init": lambda: init(sys.argv[2])}[mode]()
print("ok")
