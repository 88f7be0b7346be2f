#!/usr/bin/env python3
"""train_demo.py — trains hark's demo English recogniser (issue #22): a small WeNet U2++ Conformer
(CTC + bidirectional attention decoder, character units, dynamic-chunk training so it streams)
on the synthetic corpus that tools/demo_data.py makes (manifests DATA/{train,dev,test}.jsonl).

The model classes are WeNet's own (the `wenet` package, --wenet; fetched, never committed), so
the result is a WeNet experiment directory that tools/convert_wenet.py converts like any user's:

    EXP/final.pt        the model's state dict (WeNet's key names)
    EXP/train.yaml      WeNet's configuration for it
    EXP/units.txt       the character units ("▁" marks a word start)
    EXP/global_cmvn     WeNet's JSON CMVN statistics of the training features
    EXP/resume.pt       weights, optimizer state and step (for --resume; what travels back
                        from the GPU machine: `export` rebuilds the rest from it)

  train_demo.py train --data DATA --exp EXP --minutes M [--resume] [--total-steps N]
                      [--init MODEL] [--total-minutes T]
  train_demo.py eval  --data DATA --exp EXP [--split test] [--limit N]
  train_demo.py export --data DATA --exp EXP

Training is cut into calls of --minutes (the GPU machine runs 10-minute commands): each call
resumes from EXP (model, Adam moments, step) and saves before its time is up. The learning-rate
schedule (warm-up, then cosine to --total-steps) depends on the step only, so a run cut into
calls follows the same schedule as one long run. With --total-minutes the cosine runs over that
many minutes of training time instead (summed over the calls, kept in resume.pt), so a run whose
speed is not known in advance (another GPU, another call's start-up) still ends its schedule
where its time ends.

--init MODEL starts a new run from a converted model (hark's model-repository entry, e.g.
models/demo-en-asr: WeNet's key names, float16 or float32 matrices) instead of random weights:
its weights and its CMVN, a fresh optimizer with its --warmup. That is how a later session goes
on training the shipped recogniser when the run's own resume.pt is gone.

A resumed call keeps its run's --lr, --warmup, --max-samples, --reverb-p, --noise-p, --edge-p,
--undithered-p and --vtlp-p (kept in resume.pt) unless it names them again, and logs the change
when it does: a later call that leaves them out continues the run as it was planned, not with
the defaults.

Features: Kaldi fbank computed on the GPU (tools/demo_fbank.py, checked against hark's own
front end). Augmentation, on the GPU per batch: speed perturbation 0.9 / 1.0 / 1.1 (band-limited
resampling), room reverberation (synthetic exponentially decaying impulse responses, RT60
0.15-0.8 s; --reverb-p of the utterances), additive coloured noise (SNR 5-30 dB;
--noise-p), the silence before and after the words redrawn (0-0.3 s / 0-0.4 s; --edge-p
of the utterances, default none), dither (1.0, int16 scale; none for --undithered-p of the
utterances, default none: hark and WeNet compute features without dither at inference, so a
model that always heard dither has never seen digital silence, exact zeros, and invents words
in it), vocal tract length perturbation (--vtlp-p of the utterances, default none: the mel
filters warped by a factor drawn from 0.9-1.1, demo_fbank.warp_banks, as if the speaker's
formants were that much higher or lower), SpecAugment (2 frequency masks of at most 10 bins,
2 time masks of at most 50 frames; WeNet's defaults).
"""
import argparse
import json
import math
import os
import random
import sys
import time
from multiprocessing import Pool

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

RATE = 16000
UNITS = ["<blank>", "<unk>", "'"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
    ["\u2581", "<sos/eos>"]
TOK = {u: i for i, u in enumerate(UNITS)}
WORD = TOK["\u2581"]

D_MODEL = 128
ENC = dict(output_size=D_MODEL, attention_heads=4, linear_units=512, num_blocks=12,
           dropout_rate=0.1, positional_dropout_rate=0.1, attention_dropout_rate=0.1,
           input_layer="conv2d", normalize_before=True, cnn_module_kernel=15, use_cnn_module=True,
           activation_type="swish", pos_enc_layer_type="rel_pos",
           selfattention_layer_type="rel_selfattn", causal=True, use_dynamic_chunk=True,
           cnn_module_norm="layer_norm", use_dynamic_left_chunk=False)
DEC = dict(attention_heads=4, linear_units=512, num_blocks=2, r_num_blocks=2, dropout_rate=0.1,
           positional_dropout_rate=0.1, self_attention_dropout_rate=0.1,
           src_attention_dropout_rate=0.1)
MODEL_CONF = dict(ctc_weight=0.3, lsm_weight=0.1, length_normalized_loss=False,
                  reverse_weight=0.3)


def tokenize(text):
    """normalized text (a-z, apostrophe, single spaces) -> unit ids, "▁" before each word"""
    ids = []
    for w in text.split():
        ids.append(WORD)
        ids.extend(TOK.get(c, TOK["<unk>"]) for c in w)
    return ids


def detokenize(ids):
    return "".join(UNITS[i] for i in ids).replace("\u2581", " ").strip()


# ---- data --------------------------------------------------------------------------------------

def read_manifest(path, limit=0):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
                if limit and len(rows) >= limit:
                    break
    return rows


def load_16k(args):
    """one WAV as int16 at 16 kHz (scipy's polyphase resampler for other rates)"""
    path, = args
    import wave
    with wave.open(path) as w:
        sr, ch, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    if width != 2:
        raise ValueError(f"{path}: {8 * width}-bit samples (16-bit expected)")
    if ch > 1:
        x = x.reshape(-1, ch).mean(axis=1)
    if sr != RATE:
        from scipy.signal import resample_poly
        g = math.gcd(sr, RATE)
        x = resample_poly(x.astype(np.float32), RATE // g, sr // g)
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)


class Corpus:
    """every utterance of a split at 16 kHz in one int16 array (cached as .npy beside the data,
    so a later call on the same machine starts at once)"""

    def __init__(self, data, split, jobs, limit=0):
        rows = read_manifest(os.path.join(data, f"{split}.jsonl"), limit)
        cache = os.path.join(data, f"{split}.16k.{len(rows)}.npy")
        for r in rows:
            if not os.path.isabs(r["wav"]):
                r["wav"] = os.path.join(data, r["wav"])
        if os.path.exists(cache):
            self.audio = np.load(cache, mmap_mode="r")
            self.off = np.load(cache + ".off.npy")
        else:
            t = time.time()
            with Pool(jobs) as p:
                waves = p.map(load_16k, [(r["wav"],) for r in rows], chunksize=64)
            self.off = np.zeros(len(rows) + 1, dtype=np.int64)
            self.off[1:] = np.cumsum([len(w) for w in waves])
            self.audio = np.concatenate(waves) if waves else np.zeros(0, np.int16)
            np.save(cache + ".off.npy", self.off)
            np.save(cache, self.audio)
            log(f"{split}: {len(rows)} utterances, {self.off[-1] / RATE / 3600:.1f} h, loaded in "
                f"{time.time() - t:.0f} s")
        self.rows = rows
        self.lens = np.diff(self.off)
        self.text = [r["text"] for r in rows]
        self.ids = [tokenize(r["text"]) for r in rows]

    def hours(self):
        return float(self.off[-1]) / RATE / 3600

    def batches(self, max_samples, rng, shuffle=True):
        """length-sorted batches of at most max_samples padded samples, in random order"""
        order = np.argsort(self.lens, kind="stable")
        out, cur, cur_max = [], [], 0
        for i in order:
            n = int(self.lens[i])
            if n < 2 * 400:
                continue
            m = max(cur_max, n)
            if cur and m * (len(cur) + 1) > max_samples:
                out.append(cur)
                cur, m = [], n
            cur.append(int(i))
            cur_max = m
        if cur:
            out.append(cur)
        if shuffle:
            rng.shuffle(out)
        return out

    def wave_batch(self, idx, torch, device):
        lens = [int(self.lens[i]) for i in idx]
        buf = np.zeros((len(idx), max(lens)), dtype=np.int16)
        for k, i in enumerate(idx):
            buf[k, : lens[k]] = self.audio[self.off[i]: self.off[i + 1]]
        w = torch.from_numpy(buf)
        if device.type == "cuda":
            w = w.pin_memory()
        w = w.to(device, non_blocking=True).float()
        return w, torch.tensor(lens, device=device)


# ---- augmentation (GPU) ------------------------------------------------------------------------

def resample(torch, x, up, down, zeros=16):
    """x (B, T) resampled by up / down: a Kaiser-windowed sinc, cut-off at the lower Nyquist,
    run as `up` strided convolutions (one per output phase)"""
    B, T = x.shape
    n_out = T * up // down
    cut = min(1.0, up / down)
    beta = 8.0
    xp = torch.nn.functional.pad(x, (zeros, zeros + down))[:, None, :]
    out = torch.zeros(B, n_out, device=x.device, dtype=x.dtype)
    k = torch.arange(2 * zeros, device=x.device, dtype=torch.float64) - (zeros - 1)
    for r in range(up):
        pos = r * down / up
        base = int(math.floor(pos))
        t = (pos - base) - k  # distance from each tap to the output position
        win = torch.special.i0(beta * torch.sqrt(torch.clamp(1 - (t / zeros) ** 2, min=0))) \
            / torch.special.i0(torch.tensor(beta, dtype=torch.float64))
        w = (cut * torch.special.sinc(cut * t) * win).to(x.dtype)
        m = (n_out - r + up - 1) // up
        if m <= 0:
            continue
        y = torch.nn.functional.conv1d(xp[:, :, base + 1:], w[None, None, :], stride=down)
        out[:, r::up] = y[:, 0, :m]
    return out


def edge_silence(torch, w, lens, rng_t, p=0.0, lead_max=0.3, trail_max=0.4):
    """The silence around the words, redrawn: for --edge-p of the utterances, the samples
    before the first and after the last one above 1% of the peak become lead_max * U seconds
    before and trail_max * U after (digital silence where the clip had less; the buffer's width
    bounds it). espeak-ng and flite end their clips with 130-300 ms of silence; a TTS voice
    trained on trimmed clips ends within 100 ms of its last sound, and a recogniser that never
    heard that drops the last sound (docs/demo-voice.md)."""
    if p <= 0:  # draws nothing: runs without it keep their random streams
        return w, lens
    B, T = w.shape
    pick = torch.rand(B, generator=rng_t, device=w.device) < p
    t = torch.arange(T, device=w.device)[None, :]
    a = w.abs() * (t < lens[:, None])
    loud = a > 0.01 * a.amax(1, keepdim=True).clamp(min=1.0)
    first = torch.where(loud.any(1), loud.float().argmax(1), torch.zeros_like(lens))
    last = torch.where(loud.any(1), T - 1 - loud.flip(1).float().argmax(1), lens - 1)
    lead = (lead_max * RATE * torch.rand(B, generator=rng_t, device=w.device)).long()
    trail = (trail_max * RATE * torch.rand(B, generator=rng_t, device=w.device)).long()
    start = (first - lead).clamp(min=0)
    end = torch.minimum(last + 1 + trail, torch.full_like(last, T))
    src = t + start[:, None]
    keep = (t < (end - start)[:, None]) & (src < lens[:, None])
    y = torch.gather(w, 1, src.clamp(max=T - 1)) * keep
    return torch.where(pick[:, None], y, w), torch.where(pick, end - start, lens)


def speed_perturb(torch, w, lens, factor):
    """sox's `speed`: the waveform read as if sampled at RATE * factor and resampled to RATE, so
    it plays `factor` times faster (tempo and pitch)"""
    if factor == 1.0:
        return w, lens
    src = int(round(RATE * factor))
    g = math.gcd(src, RATE)
    out = resample(torch, w, RATE // g, src // g)
    nl = torch.clamp((lens.double() * RATE / src).floor().long(), max=out.shape[1])
    return out, nl


def reverb(torch, w, lens, rng_t, p=0.3):
    B, T = w.shape
    pick = torch.rand(B, generator=rng_t, device=w.device) < p
    if not bool(pick.any()):
        return w
    rt60 = 0.15 + 0.65 * torch.rand(B, 1, generator=rng_t, device=w.device)
    L = int(0.8 * RATE)
    t = torch.arange(L, device=w.device)[None, :] / RATE
    h = torch.randn(B, L, generator=rng_t, device=w.device) * torch.exp(-6.9078 * t / rt60)
    h[:, 0] = 1.0 / 0.3  # a direct path above the reflections
    h = h / h.norm(dim=1, keepdim=True)
    n = 1 << (T + L - 1).bit_length()
    y = torch.fft.irfft(torch.fft.rfft(w, n) * torch.fft.rfft(h, n), n)[:, :T]
    mask = torch.arange(T, device=w.device)[None, :] < lens[:, None]
    y = y * mask
    e_in = (w.square().sum(1) + 1e-3).sqrt()
    e_out = (y.square().sum(1) + 1e-3).sqrt()
    y = y * (e_in / e_out)[:, None]
    return torch.where(pick[:, None], y, w)


def add_noise(torch, w, lens, rng_t, p=0.5):
    B, T = w.shape
    pick = torch.rand(B, generator=rng_t, device=w.device) < p
    if not bool(pick.any()):
        return w
    # coloured noise: white noise shaped by f^(-alpha/2) in amplitude, alpha in [0, 2]
    n = torch.randn(B, T, generator=rng_t, device=w.device)
    spec = torch.fft.rfft(n)
    f = torch.arange(spec.shape[1], device=w.device).clamp(min=1).float()[None, :]
    alpha = 2 * torch.rand(B, 1, generator=rng_t, device=w.device)
    n = torch.fft.irfft(spec * f.pow(-alpha / 2), T)
    mask = (torch.arange(T, device=w.device)[None, :] < lens[:, None]).float()
    ps = (w.square() * mask).sum(1) / lens.clamp(min=1)
    pn = (n.square() * mask).sum(1) / lens.clamp(min=1)
    snr = 5 + 25 * torch.rand(B, generator=rng_t, device=w.device)
    gain = torch.sqrt(ps / (pn * 10 ** (snr / 10) + 1e-9))
    y = w + n * gain[:, None] * mask
    return torch.where(pick[:, None], y, w)


def spec_augment(torch, x, nf, rng_t):
    B, F, D = x.shape
    x = x.clone()
    dev = x.device
    for _ in range(2):
        wdt = torch.randint(0, 11, (B,), generator=rng_t, device=dev)
        st = (torch.rand(B, generator=rng_t, device=dev) * (D - wdt)).long()
        d = torch.arange(D, device=dev)[None, :]
        x.masked_fill_(((d >= st[:, None]) & (d < (st + wdt)[:, None]))[:, None, :], 0.0)
    for _ in range(2):
        wdt = torch.minimum(torch.randint(0, 51, (B,), generator=rng_t, device=dev), nf // 5)
        st = (torch.rand(B, generator=rng_t, device=dev) * (nf - wdt).clamp(min=1)).long()
        t = torch.arange(F, device=dev)[None, :]
        x.masked_fill_(((t >= st[:, None]) & (t < (st + wdt)[:, None]))[:, :, None], 0.0)
    return x


# ---- model -------------------------------------------------------------------------------------

def import_wenet(a):
    from wenet_import import use_wenet
    use_wenet(a.wenet, a.shims)
    from wenet.models.transformer.asr_model import ASRModel
    from wenet.models.transformer.cmvn import GlobalCMVN
    from wenet.models.transformer.ctc import CTC
    from wenet.models.transformer.decoder import BiTransformerDecoder
    from wenet.models.transformer.encoder import ConformerEncoder
    return ASRModel, GlobalCMVN, CTC, BiTransformerDecoder, ConformerEncoder


def build_model(a, mean, istd):
    import torch
    ASRModel, GlobalCMVN, CTC, BiTransformerDecoder, ConformerEncoder = import_wenet(a)
    V = len(UNITS)
    enc = ConformerEncoder(80, global_cmvn=GlobalCMVN(torch.tensor(mean), torch.tensor(istd)),
                           **ENC)
    dec = BiTransformerDecoder(V, D_MODEL, **DEC)
    ctc = CTC(V, D_MODEL)
    return ASRModel(vocab_size=V, encoder=enc, decoder=dec, ctc=ctc, **MODEL_CONF)


def train_yaml(hours, steps):
    return {
        "input_dim": 80, "output_dim": len(UNITS), "model": "asr_model",
        "encoder": "conformer", "encoder_conf": ENC,
        "decoder": "bitransformer", "decoder_conf": DEC,
        "ctc": "ctc", "ctc_conf": {"ctc_blank_id": 0},
        "model_conf": MODEL_CONF,
        "cmvn": "global_cmvn", "cmvn_conf": {"cmvn_file": "global_cmvn", "is_json_cmvn": True},
        "tokenizer": "char", "tokenizer_conf": {"symbol_table_path": "units.txt",
                                                "split_with_space": False},
        "dataset": "asr",
        "dataset_conf": {"fbank_conf": {"num_mel_bins": 80, "frame_shift": 10,
                                        "frame_length": 25, "dither": 1.0},
                         "resample_conf": {"resample_rate": RATE},
                         "speed_perturb": True, "spec_aug": True,
                         "spec_aug_conf": {"num_t_mask": 2, "num_f_mask": 2, "max_t": 50,
                                           "max_f": 10}},
        "hark_demo": {"trainer": "tools/train_demo.py", "data_hours": round(hours, 2),
                      "steps": steps},
    }


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def cmvn_stats(torch, corpus, banks, window, device, n=2000):
    """WeNet's JSON global CMVN (sums over frames) from n training utterances"""
    rng = np.random.default_rng(1)
    pick = rng.choice(len(corpus.rows), size=min(n, len(corpus.rows)), replace=False)
    s = torch.zeros(80, dtype=torch.float64, device=device)
    s2 = torch.zeros(80, dtype=torch.float64, device=device)
    frames = 0
    from demo_fbank import fbank
    for k in range(0, len(pick), 64):
        w, lens = corpus.wave_batch(pick[k: k + 64], torch, device)
        f, nf = fbank(w, lens, banks, window)
        s += f.double().sum((0, 1))
        s2 += f.double().square().sum((0, 1))
        frames += int(nf.sum())
    return {"mean_stat": s.tolist(), "var_stat": s2.tolist(), "frame_num": frames}


def cmvn_mean_istd(stats):
    n = stats["frame_num"]
    mean = np.array(stats["mean_stat"]) / n
    var = np.maximum(np.array(stats["var_stat"]) / n - mean ** 2, 1e-20)
    return mean.astype(np.float32), (1.0 / np.sqrt(var)).astype(np.float32)


def lr_at(step, peak, warm, total):
    if step < warm:
        return peak * (step + 1) / warm
    p = min(1.0, (step - warm) / max(1, total - warm))
    return peak * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * p)))


class Phases:
    """--phase-times: the wall time of each phase of a training step, the GPU synchronised at
    each mark (which costs a little speed), averaged over the steps between two log lines"""

    def __init__(self, torch, device, on):
        self.on = on
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.acc, self.t = {}, 0.0

    def start(self):
        if self.on:
            self.sync()
            self.t = time.perf_counter()

    def mark(self, name):
        if self.on:
            self.sync()
            now = time.perf_counter()
            self.acc[name] = self.acc.get(name, 0.0) + now - self.t
            self.t = now

    def report(self, steps):
        if not self.on or not self.acc:
            return ""
        out = " | ms per step: " + ", ".join(f"{k} {1000 * v / steps:.0f}"
                                              for k, v in self.acc.items())
        self.acc = {}
        return out


def lr_timed(step, seconds, peak, warm, total_s):
    """--total-minutes: linear warm-up over the optimizer's first `warm` steps, then the same
    cosine as lr_at over training seconds"""
    w = min(1.0, (step + 1) / warm)
    p = min(1.0, seconds / total_s)
    return peak * w * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * p)))


def read_init(path):
    """--init: a converted model's tensors (WeNet's names, float32) from MODEL/1/model.safetensors
    (or MODEL/model.safetensors, or the file itself)"""
    from hark_entry import read_safetensors
    for cand in (os.path.join(path, "1", "model.safetensors"),
                 os.path.join(path, "model.safetensors"), path):
        if os.path.isfile(cand):
            tensors, meta = read_safetensors(cand)
            if meta.get("family") != "wenet_u2":
                raise SystemExit(f"{cand}: family {meta.get('family')!r}, not wenet_u2")
            return tensors
    raise SystemExit(f"--init {path}: no model.safetensors there")


def cmvn_from_model(init):
    """WeNet's JSON CMVN statistics that give back exactly the model's float32 mean and istd
    (one frame whose sums are the mean and the variance)"""
    mean = init["encoder.global_cmvn.mean"].astype(np.float64)
    istd = init["encoder.global_cmvn.istd"].astype(np.float64)
    stats = {"mean_stat": mean.tolist(), "var_stat": (mean ** 2 + 1.0 / istd ** 2).tolist(),
             "frame_num": 1}
    m, i = cmvn_mean_istd(stats)
    if not (np.array_equal(m, init["encoder.global_cmvn.mean"]) and
            np.array_equal(i, init["encoder.global_cmvn.istd"])):
        raise SystemExit("--init: the model's CMVN does not survive WeNet's JSON statistics")
    return stats


def load_init(torch, model, init):
    sd = model.state_dict()
    missing = [k for k in sd if k not in init and not deterministic(k)]
    extra = [k for k in init if k not in sd]
    bad = [k for k in init if k in sd and tuple(init[k].shape) != tuple(sd[k].shape)]
    if missing or extra or bad:
        raise SystemExit(f"--init: does not match this model (missing {missing[:3]}, unexpected "
                         f"{extra[:3]}, other shapes {bad[:3]})")
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in init.items()}, strict=False)


def ctc_greedy(torch, model, feats, nf):
    enc, mask = model.encoder(feats, nf)
    lp = model.ctc.log_softmax(enc)
    best = lp.argmax(-1)
    lens = mask.squeeze(1).sum(1)
    out = []
    for b in range(best.shape[0]):
        prev, ids = -1, []
        for t in best[b, : int(lens[b])].tolist():
            if t != prev and t != 0:
                ids.append(t)
            prev = t
        out.append(detokenize(ids))
    return out


def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(b)]


def evaluate(torch, model, corpus, banks, window, device, max_samples):
    from demo_fbank import fbank
    model.eval()
    errs = words = 0
    hyps = {}
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16,
                                         enabled=device.type == "cuda"):
        for idx in corpus.batches(max_samples, None, shuffle=False):
            w, lens = corpus.wave_batch(idx, torch, device)
            f, nf = fbank(w, lens, banks, window)
            for i, h in zip(idx, ctc_greedy(torch, model, f, nf)):
                ref = corpus.text[i].split()
                errs += edit_distance(ref, h.split())
                words += len(ref)
                hyps[corpus.rows[i]["key"]] = h
    model.train()
    return errs / max(1, words), hyps


# ---- commands ----------------------------------------------------------------------------------

def save_atomic(torch, obj, path):
    torch.save(obj, path + ".tmp")
    os.replace(path + ".tmp", path)


def cmd_train(a):
    import torch
    import yaml
    from demo_fbank import fbank, mel_banks, povey, warp_banks
    t_start = time.time()
    deadline = t_start + a.minutes * 60
    device = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(a.exp, exist_ok=True)
    train = Corpus(a.data, "train", a.jobs, a.limit)
    dev = Corpus(a.data, "dev", a.jobs, a.dev_limit)
    log(f"train {train.hours():.1f} h ({len(train.rows)} utts), dev {dev.hours():.2f} h")
    banks, window = mel_banks(device=device), povey(device)
    rp = os.path.join(a.exp, "resume.pt")
    resuming = a.resume and os.path.exists(rp)
    init = read_init(a.init) if a.init and not resuming else None
    cmvn_path = os.path.join(a.exp, "global_cmvn")
    if a.resume and os.path.exists(cmvn_path) and init is None:
        stats = json.load(open(cmvn_path))
    elif init is not None:
        stats = cmvn_from_model(init)
        with open(cmvn_path, "w") as f:
            json.dump(stats, f)
    else:
        stats = cmvn_stats(torch, train, banks, window, device)
        with open(cmvn_path, "w") as f:
            json.dump(stats, f)
    mean, istd = cmvn_mean_istd(stats)
    torch.manual_seed(a.seed)
    model = build_model(a, mean, istd).to(device)
    nparam = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9,
                            weight_decay=1e-6)
    step, epoch, hist, rewarm, seconds = 0, 0, [], -1, 0.0
    if resuming:
        r, moments = load_resume(torch, rp, model, opt, device)
        step, epoch, hist = r["step"], r["epoch"], r.get("hist", [])
        seconds = r.get("seconds", 0.0)
        if a.total_minutes is None:
            a.total_minutes = r.get("total_minutes")
        if not moments:
            rewarm = step
        log(f"resumed at step {step} (epoch {epoch}){'' if moments else ', Adam restarted'}")
    elif init is not None:
        load_init(torch, model, init)
        hist.append({"init": a.init})
        log(f"weights and CMVN from {a.init}")
    run_options(a, r.get("opts", {}) if resuming else {})
    with open(os.path.join(a.exp, "units.txt"), "w") as f:
        f.write("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))
    if a.total_minutes:
        log(f"model: {nparam / 1e6:.2f} M parameters; from step {step}, {seconds / 60:.1f} of "
            f"{a.total_minutes} minutes trained")
    else:
        log(f"model: {nparam / 1e6:.2f} M parameters; steps {step}..{a.total_steps}")

    rng = random.Random(a.seed * 1000003 + step)
    g = torch.Generator(device=device)
    g.manual_seed(a.seed * 7919 + step)
    model.train()
    done = False
    t_log, frames_seen = time.time(), 0
    t_prev = time.time()
    ph = Phases(torch, device, a.phase_times)
    while not done:
        # a fresh order at each epoch and each resumed call (seeded by the step)
        batches = train.batches(a.max_samples, random.Random(a.seed * 31 + step))
        for idx in batches:
            now = time.time()
            seconds += now - t_prev
            t_prev = now
            over = seconds >= a.total_minutes * 60 if a.total_minutes else step >= a.total_steps
            if over or now > deadline - a.save_margin:
                done = True
                break
            for pg in opt.param_groups:
                if a.total_minutes:
                    pg["lr"] = lr_timed(step, seconds, a.lr, a.warmup,
                                        a.total_minutes * 60)
                else:
                    pg["lr"] = lr_at(step, a.lr, a.warmup, a.total_steps)
                if rewarm >= 0 and step - rewarm < 100:  # fresh moments: ease back in
                    pg["lr"] *= (step - rewarm + 1) / 100
            ph.start()
            w, lens = train.wave_batch(idx, torch, device)
            ph.mark("data")
            w, lens = edge_silence(torch, w, lens, g, a.edge_p)
            w, lens = speed_perturb(torch, w, lens, rng.choice((0.9, 1.0, 1.1)))
            w = reverb(torch, w, lens, g, a.reverb_p)
            w = add_noise(torch, w, lens, g, a.noise_p)
            w = torch.clamp(w, -32768, 32767)
            ph.mark("augment")
            dither = 1.0
            if a.undithered_p > 0:  # draws nothing when off: runs without it keep their streams
                dither = (torch.rand(w.shape[0], generator=g, device=w.device) >=
                          a.undithered_p).float()
            bk = banks
            if a.vtlp_p > 0:  # likewise
                on = torch.rand(w.shape[0], generator=g, device=w.device) < a.vtlp_p
                alpha = 0.9 + 0.2 * torch.rand(w.shape[0], generator=g, device=w.device)
                bk = warp_banks(banks, torch.where(on, alpha, torch.ones_like(alpha)))
            with torch.no_grad():
                f, nf = fbank(w, lens, bk, window, dither=dither)
                f = spec_augment(torch, f, nf, g)
            tgt = [torch.tensor(train.ids[i]) for i in idx]
            batch = {"feats": f, "feats_lengths": nf.int(),
                     "target": torch.nn.utils.rnn.pad_sequence(tgt, batch_first=True,
                                                               padding_value=-1),
                     "target_lengths": torch.tensor([len(t) for t in tgt]),
                     "langs": ["en"] * len(idx), "tasks": ["transcribe"] * len(idx)}
            ph.mark("features")
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                out = model(batch, device)
            loss = out["loss"]  # WeNet's losses are already per utterance
            ph.mark("forward")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            ph.mark("backward")
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            if torch.isfinite(gn):
                opt.step()
            ph.mark("update")
            step += 1
            frames_seen += int(nf.sum())
            if step % a.log_every == 0:
                dt = time.time() - t_log
                log(f"step {step} epoch {epoch} loss {loss.item():.3f} ctc "
                    f"{out['loss_ctc'].item():.3f} att "
                    f"{out['loss_att'].item():.3f} acc {out['th_accuracy']:.3f} "
                    f"lr {opt.param_groups[0]['lr']:.2e} | {frames_seen / 100 / dt:.0f} s of "
                    f"audio per s{ph.report(a.log_every)}")
                t_log, frames_seen = time.time(), 0
        else:
            epoch += 1
    wer, _ = evaluate(torch, model, dev, banks, window, device, a.max_samples)
    hist.append({"step": step, "epoch": epoch, "dev_wer_ctc_greedy": round(wer, 4),
                 "minutes": round((time.time() - t_start) / 60, 2)})
    log(f"step {step}: dev WER (CTC greedy) {100 * wer:.2f}%")
    save_resume(torch, rp, model, opt, {"step": step, "epoch": epoch, "hist": hist,
                                        "hours": train.hours(), "seconds": seconds,
                                        "total_minutes": a.total_minutes,
                                        "opts": {k: getattr(a, k) for k in RUN_OPTIONS}})
    write_experiment(torch, a.exp, model, train.hours(), step)
    with open(os.path.join(a.exp, "history.json"), "w") as f:
        json.dump(hist, f, indent=1)  # each call: step, epoch, dev WER, minutes


# the run's options: a resumed call keeps the values its run started with (resume.pt's "opts")
# unless they are given again, so a call that forgets them does not change the run
RUN_OPTIONS = {"lr": 2e-3, "warmup": 400, "max_samples": RATE * 1200, "reverb_p": 0.15,
               "noise_p": 0.25, "edge_p": 0.0, "undithered_p": 0.0, "vtlp_p": 0.0}


def run_options(a, saved):
    for k, default in RUN_OPTIONS.items():
        flag = "--" + k.replace("_", "-")
        if getattr(a, k) is None:
            setattr(a, k, saved.get(k, default))
        elif k in saved and saved[k] != getattr(a, k):
            log(f"{flag} {getattr(a, k)}: the run had {saved[k]}")
    log("options: " + ", ".join(f"{k} {getattr(a, k)}" for k in RUN_OPTIONS))


def write_experiment(torch, exp, model, hours, step):
    """final.pt + train.yaml: what tools/convert_wenet.py (and WeNet) read"""
    import yaml
    save_atomic(torch, model.state_dict(), os.path.join(exp, "final.pt"))
    with open(os.path.join(exp, "train.yaml"), "w") as f:
        yaml.safe_dump(train_yaml(hours, step), f, sort_keys=True)
    with open(os.path.join(exp, "units.txt"), "w") as f:
        f.write("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))


def deterministic(name):
    """buffers WeNet rebuilds from the hyper-parameters (sinusoidal position tables)"""
    return name.endswith(".pe")


def save_resume(torch, path, model, opt, state):
    """the state a later call resumes from, in two files that can travel (at most 16 MiB a file
    comes back from the GPU machine, 64 MiB a call goes there): PATH holds the weights in float32
    (less the position tables) and the step; PATH's ".adam" file Adam's moments in bfloat16.
    Without the moments a resumed run restarts Adam with a short warm-up."""
    sd = {k: v for k, v in model.state_dict().items() if not deterministic(k)}
    o = opt.state_dict()
    for st in o["state"].values():
        for k in ("exp_avg", "exp_avg_sq"):
            if k in st:
                st[k] = st[k].to(torch.bfloat16)
    save_atomic(torch, o, path + ".adam")
    save_atomic(torch, dict(state, model=sd), path)


def load_resume(torch, path, model, opt=None, device="cpu"):
    """loads the weights (and Adam's moments when present); returns the saved state (step,
    epoch, hist, hours, and with --total-minutes seconds / total_minutes) and whether the
    moments were there"""
    r = torch.load(path, map_location=device)
    missing, unexpected = model.load_state_dict(r["model"], strict=False)
    bad = [k for k in missing if not deterministic(k)] + list(unexpected)
    if bad:
        raise SystemExit(f"{path}: does not match the model ({bad[:4]} ...)")
    moments = False
    if opt is not None and os.path.exists(path + ".adam"):
        o = torch.load(path + ".adam", map_location=device)
        for st in o["state"].values():
            for k in ("exp_avg", "exp_avg_sq"):
                if k in st:
                    st[k] = st[k].float()
        opt.load_state_dict(o)
        moments = True
    return r, moments


def cmd_export(a):
    """EXP/resume.pt -> EXP/final.pt + train.yaml + units.txt (after the state came back from
    the GPU machine)"""
    import torch
    mean, istd = cmvn_mean_istd(json.load(open(os.path.join(a.exp, "global_cmvn"))))
    model = build_model(a, mean, istd)
    rp = os.path.join(a.exp, "resume.pt")
    r, _ = load_resume(torch, rp, model)
    step = r["step"]
    write_experiment(torch, a.exp, model, r.get("hours", 0.0), step)
    print(f"{a.exp}: final.pt at step {step}")


def cmd_eval(a):
    import torch
    from demo_fbank import mel_banks, povey
    device = torch.device(a.device)
    corpus = Corpus(a.data, a.split, a.jobs, a.limit)
    mean, istd = cmvn_mean_istd(json.load(open(os.path.join(a.exp, "global_cmvn"))))
    model = build_model(a, mean, istd).to(device)
    load_resume(torch, os.path.join(a.exp, "resume.pt"), model, None, device)
    wer, hyps = evaluate(torch, model, corpus, mel_banks(device=device), povey(device), device,
                         a.max_samples)
    print(json.dumps({"split": a.split, "utterances": len(corpus.rows),
                      "hours": round(corpus.hours(), 3), "wer_ctc_greedy": round(wer, 4)}))
    if a.hyps:
        with open(a.hyps, "w") as f:
            for k, h in hyps.items():
                f.write(f"{k} {h}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=["train", "eval", "export"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--exp", required=True)
    ap.add_argument("--wenet", default=os.path.join(HERE, "..", ".ext"))
    ap.add_argument("--shims", default=os.path.join(HERE, "..", ".ext", "shims"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--save-margin", type=float, default=45.0,
                    help="seconds kept at the end of a call for the dev pass and the save")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--total-steps", type=int, default=6000)
    ap.add_argument("--total-minutes", type=float, default=None,
                    help="the schedule over this many minutes of training (all calls) instead "
                         "of --total-steps")
    ap.add_argument("--init", default=None,
                    help="a new run starts from this converted model (e.g. models/demo-en-asr)")
    # RUN_OPTIONS: None = the resumed run's value, else the default there
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps (400)")
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate (2e-3)")
    ap.add_argument("--max-samples", type=int, default=None,
                    help="padded samples per batch (16 kHz): 1200 s of audio by default")
    ap.add_argument("--reverb-p", type=float, default=None,
                    help="share of utterances reverberated (0.15)")
    ap.add_argument("--noise-p", type=float, default=None,
                    help="share of utterances with noise added (SNR 5-30 dB; 0.25)")
    ap.add_argument("--edge-p", type=float, default=None,
                    help="share of utterances whose leading / trailing silence is redrawn "
                         "(0-0.3 s / 0-0.4 s; 0)")
    ap.add_argument("--undithered-p", type=float, default=None,
                    help="share of utterances whose features get no dither, as at inference, "
                         "so digital silence is heard as it comes (0)")
    ap.add_argument("--vtlp-p", type=float, default=None,
                    help="share of utterances whose mel filters are warped by a factor drawn "
                         "from 0.9-1.1 (vocal tract length perturbation; 0)")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--limit", type=int, default=0, help="first N utterances only (tests)")
    ap.add_argument("--dev-limit", type=int, default=2000)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--phase-times", action="store_true",
                    help="log each phase's milliseconds per step (data, augment, features, "
                         "forward, backward, update; synchronises the GPU at each)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--hyps", default=None, help="eval: write 'key hypothesis' lines here")
    a = ap.parse_args()
    if a.cmd != "train":  # no run to take them from
        for k, default in RUN_OPTIONS.items():
            if getattr(a, k) is None:
                setattr(a, k, default)
    {"train": cmd_train, "eval": cmd_eval, "export": cmd_export}[a.cmd](a)


if __name__ == "__main__":
    main()
