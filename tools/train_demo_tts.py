#!/usr/bin/env python3
"""train_demo_tts.py — trains hark's demo voice (issue 22 part 3, docs/demo-voice.md): a small
FastSpeech in NVIDIA DeepLearningExamples' layout (CUDA-Optimized/FastSpeech: the same module
names, shapes and arithmetic, written here, not copied), on the one-voice data that
tools/demo_tts_data.py makes (DATA/train.pt, DATA/test.pt), so that tools/convert_fastspeech.py
converts the result like any DLE checkpoint and HiFi-GAN V3 (LJSpeech) vocodes its mels.

  train_demo_tts.py train  --data DATA --exp EXP --minutes M [--size demo|tiny] [--resume]
  train_demo_tts.py export --exp EXP          # EXP/fastspeech.pt + EXP/fastspeech.yaml
  train_demo_tts.py half --exp EXP --out F    # EXP/fastspeech.pt -> F (float16, no sinusoid tables)
  train_demo_tts.py fill --exp EXP --half F   # F -> EXP/fastspeech.pt (float32, tables computed)

EXP holds: resume.pt (weights, Adam moments, step, training seconds: what travels back from the
GPU machine), aligner.pt (the alignment model), durations.pt (the durations it gave), log.jsonl;
`export` writes fastspeech.pt ({'step', 'model': state dict with DataParallel's `module.`
prefix}, as DLE's trainer saves it) and fastspeech.yaml (DLE's hparams keys that the converter
reads).

Durations (DLE trains on Tacotron 2 alignments; there is none here): a small alignment model in
the manner of "One TTS Alignment To Rule Them All" (Badlani et al., 2021; FastPitch 1.1) is
trained first, alone: text and mel encoders (convolutions), a soft attention from the squared
distances between their outputs, log-softmax over the symbols plus a beta-binomial prior, and the
forward-sum loss (CTC over the symbols in order, with a blank). Monotonic alignment search
(Viterbi over the same log-probabilities: each frame on one symbol, symbols in order, every
symbol at least one frame) then gives each symbol of the ids hark's front end produces — letters,
spaces and punctuation alike — its number of mel frames, summing to the utterance's frames.

FastSpeech: DLE's model (post-LN FFT blocks: fused per-head [q|k|v] linear, scaled dot product
over 64-wide heads, fc + residual + LayerNorm, conv(k) + ReLU + conv(k) + residual + LayerNorm,
padding masked; duration predictor conv + ReLU + LN twice and a linear, trained on log(d + 1);
length regulator; mel linear), dropout 0.1, L1 mel loss + MSE duration loss, AdamW, warm-up then
cosine decay over --total-minutes of training time (so a run cut into calls follows one
schedule), bf16 autocast on CUDA, the whole data set on the device, batches of similar lengths.
"""
import argparse
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np  # noqa: E402

import convert_fastspeech  # noqa: E402 (the positional table the converter checks against)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

N_SYMBOLS = 148  # DLE's symbols; the embedding has one more row (padding_idx 0)


def size(d, filt, layers, heads, dp):
    """DLE's hparams keys of a FastSpeech with `layers` FFT blocks a side of width d"""
    return dict(max_seq_len=2048, d_model=d, phoneme_side_n_layer=layers,
                phoneme_side_head=heads, phoneme_side_conv1d_filter_size=filt,
                phoneme_side_output_size=d, mel_side_n_layer=layers, mel_side_head=heads,
                mel_side_conv1d_filter_size=filt, mel_side_output_size=d, fft_conv1d_kernel=3,
                fft_conv1d_padding=1, duration_predictor_filter_size=dp,
                duration_predictor_kernel_size=3, dropout=0.1, n_mels=80)


SIZES = {
    # the first voice: 4 + 4 FFT blocks of 128, 2 heads (of DLE's fixed 64), filter 512
    'demo': size(128, 512, 4, 2, 128),
    # the shipped voice: wider (192, filter 768), twice the parameters for the letters-to-sound
    # rules it must learn
    'demo-l': size(192, 768, 4, 2, 192),
    # the CPU proof of the pipeline
    'tiny': size(32, 64, 1, 1, 32),
}
AUDIO = dict(sr=22050, n_fft=1024, win_len=1024, hop_len=256, num_mels=80, mel_fmin=0.0,
             mel_fmax=8000.0)


# ---- FastSpeech in DLE's layout ---------------------------------------------------------------

def sinusoid_table(n, d):
    """DLE's get_sinusoid_encoding_table(n, d, padding_idx=0): the converter's check table."""
    return torch.from_numpy(convert_fastspeech.sinusoid_table(n, d))


def attention(q, k, v, keep, p):
    """softmax(q k^T / sqrt(64)) v over the kept keys: PyTorch's fused kernel where it has one
    (2.0 and later), else the plain arithmetic (Debian's 1.13, on the CPU)."""
    if hasattr(F, 'scaled_dot_product_attention'):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=p)
    w = torch.matmul(q, k.transpose(-1, -2)) / 8.0
    w = F.dropout(torch.softmax(w.masked_fill(~keep, float('-inf')), dim=-1), p)
    return torch.matmul(w, v)


class MultiHeadAttention(nn.Module):
    """DLE's: one linear to n_head * (64 + 64 + 64), per head [q | k | v]; softmax(q k^T / 8)
    over the unpadded keys; heads concatenated head-major; fc, dropout, + input, LayerNorm."""

    def __init__(self, d_model, n_head, dropout):
        super().__init__()
        self.n_head, self.p = n_head, dropout
        self.linear = nn.Linear(d_model, n_head * 192)
        nn.init.xavier_normal_(self.linear.weight)
        self.layer_norm = nn.LayerNorm(d_model)
        self.fc = nn.Linear(n_head * 64, d_model)
        nn.init.xavier_normal_(self.fc.weight)

    def forward(self, x, keep):  # keep: (B, 1, 1, T) bool, True for real keys
        b, t, _ = x.shape
        h = self.linear(x).view(b, t, self.n_head, 192).transpose(1, 2)  # (B, H, T, 192)
        q, k, v = h[..., :64], h[..., 64:128], h[..., 128:]
        o = attention(q, k, v, keep, self.p if self.training else 0.0)
        o = o.transpose(1, 2).reshape(b, t, self.n_head * 64)
        o = F.dropout(self.fc(o), self.p, self.training)
        return self.layer_norm(o + x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_inner, kernel, padding, dropout):
        super().__init__()
        self.p = dropout
        self.w_1 = nn.Conv1d(d_model, d_inner, kernel, padding=padding)
        self.w_2 = nn.Conv1d(d_inner, d_model, kernel, padding=padding)
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, x):
        o = self.w_2(F.relu(self.w_1(x.transpose(1, 2)))).transpose(1, 2)
        return self.layer_norm(F.dropout(o, self.p, self.training) + x)


class FFTBlock(nn.Module):
    def __init__(self, d_model, d_inner, n_head, kernel, padding, dropout):
        super().__init__()
        self.slf_attn = MultiHeadAttention(d_model, n_head, dropout)
        self.pos_ffn = PositionwiseFeedForward(d_model, d_inner, kernel, padding, dropout)

    def forward(self, x, mask, keep):  # mask (B, T, 1) float
        x = self.slf_attn(x, keep) * mask
        return self.pos_ffn(x) * mask


class FFTBlocks(nn.Module):
    def __init__(self, max_seq_len, n_layers, n_head, d_model, d_inner, kernel, padding, dropout):
        super().__init__()
        self.position = nn.Embedding.from_pretrained(sinusoid_table(max_seq_len + 1, d_model),
                                                     freeze=True)
        self.layer_stack = nn.ModuleList(FFTBlock(d_model, d_inner, n_head, kernel, padding,
                                                  dropout) for _ in range(n_layers))

    def forward(self, x, pos):  # pos (B, T): 1..len, 0 on padding
        mask = pos.ne(0).unsqueeze(-1).to(x.dtype)
        keep = pos.ne(0)[:, None, None, :]
        x = x + self.position(pos)
        for layer in self.layer_stack:
            x = layer(x, mask, keep)
        return x, mask


class DurationPredictor(nn.Module):
    def __init__(self, d_in, filt, kernel, dropout):
        super().__init__()
        self.p = dropout
        self.conv1d_1 = nn.Conv1d(d_in, filt, kernel, padding=1)
        self.layer_norm_1 = nn.LayerNorm(filt)
        self.conv1d_2 = nn.Conv1d(filt, filt, kernel, padding=1)
        self.layer_norm_2 = nn.LayerNorm(filt)
        self.linear_layer = nn.Linear(filt, 1)

    def forward(self, x, mask):
        x = x * mask
        o = F.relu(self.conv1d_1(x.transpose(1, 2)).transpose(1, 2))
        o = F.dropout(self.layer_norm_1(o), self.p, self.training)
        o = F.relu(self.conv1d_2(o.transpose(1, 2)).transpose(1, 2))
        o = F.dropout(self.layer_norm_2(o), self.p, self.training)
        return (self.linear_layer(o) * mask).squeeze(-1)


class LengthRegulator(nn.Module):
    def __init__(self, d_in, filt, kernel, dropout):
        super().__init__()
        self.duration_predictor = DurationPredictor(d_in, filt, kernel, dropout)


class FastSpeech(nn.Module):
    """DLE's Fastspeech module tree (word_emb, phoneme_side, length_regulator.duration_predictor,
    mel_side, mel_linear); forward takes the frame -> symbol map of the target durations."""

    def __init__(self, h):
        super().__init__()
        d = h['d_model']
        self.word_emb = nn.Embedding(N_SYMBOLS + 1, d, padding_idx=0)
        self.phoneme_side = FFTBlocks(h['max_seq_len'], h['phoneme_side_n_layer'],
                                      h['phoneme_side_head'], d,
                                      h['phoneme_side_conv1d_filter_size'],
                                      h['fft_conv1d_kernel'], h['fft_conv1d_padding'],
                                      h['dropout'])
        self.length_regulator = LengthRegulator(d, h['duration_predictor_filter_size'],
                                                h['duration_predictor_kernel_size'], h['dropout'])
        self.mel_side = FFTBlocks(h['max_seq_len'], h['mel_side_n_layer'], h['mel_side_head'], d,
                                  h['mel_side_conv1d_filter_size'], h['fft_conv1d_kernel'],
                                  h['fft_conv1d_padding'], h['dropout'])
        self.mel_linear = nn.Linear(d, h['n_mels'])

    def forward(self, ids, pos, frame_tok, mel_pos):
        """ids, pos (B, S); frame_tok (B, T): the symbol of each frame (0 on padding), mel_pos
        (B, T): 1..T, 0 on padding. Returns (mel (B, T, n_mels), log-duration (B, S))."""
        x, mask = self.phoneme_side(self.word_emb(ids), pos)
        logd = self.length_regulator.duration_predictor(x, mask)
        idx = frame_tok.unsqueeze(-1).expand(-1, -1, x.shape[-1])
        y = torch.gather(x, 1, idx) * mel_pos.ne(0).unsqueeze(-1).to(x.dtype)
        y, _ = self.mel_side(y, mel_pos)
        return self.mel_linear(y), logd

    @torch.no_grad()
    def infer(self, ids, alpha=1.0):
        """One sentence (1, S) as DLE's inference runs it: durations max(exp(x) - 1, 0),
        round(d * alpha), the length regulator, the mel side (capped at max_seq_len)."""
        pos = torch.arange(1, ids.shape[1] + 1, device=ids.device)[None]
        x, mask = self.phoneme_side(self.word_emb(ids), pos)
        d = torch.clamp_min(torch.exp(self.length_regulator.duration_predictor(x, mask)) - 1, 0)
        rep = torch.round(d[0].float() * alpha).long()
        y = torch.repeat_interleave(x[0], rep, dim=0)[None]
        n = min(y.shape[1], self.mel_side.position.num_embeddings - 1)
        if n == 0:
            return torch.zeros(1, 0, self.mel_linear.out_features), rep
        y = y[:, :n]
        y, _ = self.mel_side(y, torch.arange(1, n + 1, device=ids.device)[None])
        return self.mel_linear(y), rep


# ---- alignment ---------------------------------------------------------------------------------

class Aligner(nn.Module):
    """Text keys and mel queries from small conv stacks; log p(symbol | frame) from their squared
    distances (temperature 0.0005), log-softmax over the symbols."""

    def __init__(self, d=256, att=80, n_mels=80):
        super().__init__()
        self.emb = nn.Embedding(N_SYMBOLS + 1, d, padding_idx=0)
        self.key = nn.Sequential(nn.Conv1d(d, 2 * d, 3, padding=1), nn.ReLU(),
                                 nn.Conv1d(2 * d, 2 * d, 3, padding=1), nn.ReLU(),
                                 nn.Conv1d(2 * d, att, 1))
        self.query = nn.Sequential(nn.Conv1d(n_mels, 2 * n_mels, 3, padding=1), nn.ReLU(),
                                   nn.Conv1d(2 * n_mels, n_mels, 1), nn.ReLU(),
                                   nn.Conv1d(n_mels, att, 1))

    def forward(self, ids, mels, sym_keep, log_prior):
        """ids (B, S), mels (B, T, n) normalised, sym_keep (B, S) bool, log_prior (B, T, S).
        Returns log p (B, T, S) with -1e4 on padded symbols (float32)."""
        k = self.key(self.emb(ids).transpose(1, 2)).float()      # (B, A, S)
        q = self.query(mels.transpose(1, 2)).float()             # (B, A, T)
        dist = (q * q).sum(1).unsqueeze(2) - 2 * torch.bmm(q.transpose(1, 2), k) + \
            (k * k).sum(1).unsqueeze(1)                          # (B, T, S)
        logits = (-0.0005 * dist).masked_fill(~sym_keep[:, None, :], -1e4)
        lp = F.log_softmax(logits, dim=2) + log_prior
        return lp.masked_fill(~sym_keep[:, None, :], -1e4)


def beta_binomial_log_prior(s_len, t_len, s_max, t_max, device, scale=1.0):
    """(B, T, S) log BetaBinomial(s; n = S - 1, a = scale (t + 1), b = scale (T - t)): symbol s
    is likely at frame t near s / S = t / T (0 on padding)."""
    s = torch.arange(s_max, device=device, dtype=torch.float64)[None, None, :]
    t = torch.arange(t_max, device=device, dtype=torch.float64)[None, :, None]
    n = (s_len.to(torch.float64) - 1)[:, None, None]
    tl = t_len.to(torch.float64)[:, None, None]
    a = scale * (t + 1)
    b = scale * (tl - t).clamp_min(1)
    lg = torch.lgamma
    k = torch.minimum(s, n)

    def lbeta(x, y):
        return lg(x) + lg(y) - lg(x + y)

    lp = lg(n + 1) - lg(k + 1) - lg(n - k + 1) + lbeta(k + a, n - k + b) - lbeta(a, b)
    ok = (s <= n) & (t < tl)
    return torch.where(ok, lp, torch.zeros_like(lp)).float()


def forward_sum_loss(lp, s_len, t_len, blank_logprob=-1.0):
    """CTC over the symbols in order (each its own class 1..S, blank 0) of log p (B, T, S)."""
    x = F.pad(lp, (1, 0), value=blank_logprob)
    x = F.log_softmax(x, dim=2).transpose(0, 1)                  # (T, B, S + 1)
    tgt = torch.arange(1, lp.shape[2] + 1, device=lp.device)[None].expand(lp.shape[0], -1)
    return F.ctc_loss(x, tgt, t_len, s_len, blank=0, reduction='mean', zero_infinity=True)


@torch.no_grad()
def monotonic_alignment(lp, s_len, t_len):
    """Viterbi: the best path through (T, S) of log p that starts at (0, 0), ends at
    (T - 1, S - 1) and at each frame stays or moves one symbol on. Returns durations (B, S)
    (frames per symbol, each >= 1 where s < S, summing to T)."""
    b, t_max, s_max = lp.shape
    neg = -1e30
    lp = lp.float()
    q = torch.full((b, s_max), neg, device=lp.device, dtype=torch.float32)
    q[:, 0] = lp[:, 0, 0]
    moved = torch.zeros(b, t_max, s_max, dtype=torch.bool, device=lp.device)
    for t in range(1, t_max):
        diag = F.pad(q[:, :-1], (1, 0), value=neg)
        take = diag > q
        moved[:, t] = take
        q = torch.where(take, diag, q) + lp[:, t]
    s = (s_len - 1).clone()
    dur = torch.zeros(b, s_max, dtype=torch.long, device=lp.device)
    rows = torch.arange(b, device=lp.device)
    for t in range(t_max - 1, -1, -1):
        on = t < t_len
        dur[rows, s] += on.long()
        step = moved[rows, t, s] & on & (s > 0)
        s = s - step.long()
    return dur


# ---- data --------------------------------------------------------------------------------------

class Data:
    """A split on the device: ids and mels concatenated, with offsets; batches of similar length
    padded on the device."""

    def __init__(self, path, device, durations=None):
        d = torch.load(path)
        self.keys = d['keys']
        self.n = len(self.keys)
        self.s_len = torch.tensor([len(x) for x in d['ids']])
        self.t_len = torch.tensor([m.shape[0] for m in d['mels']])
        self.ids = torch.cat([x.long() for x in d['ids']]).to(device)
        self.mels = torch.cat(d['mels']).to(device)          # (sum T, 80) float16
        self.s_off = torch.cat([torch.zeros(1, dtype=torch.long), self.s_len.cumsum(0)[:-1]])
        self.t_off = torch.cat([torch.zeros(1, dtype=torch.long), self.t_len.cumsum(0)[:-1]])
        self.device = device
        m = self.mels.float()
        self.mean, self.std = m.mean(0), m.std(0).clamp_min(1e-3)
        self.dur = None
        if durations is not None:
            self.set_durations(durations)

    def set_durations(self, dur):
        """dur: list of per-utterance long tensors (CPU)."""
        self.dur = torch.cat(dur).to(self.device)

    def _gather(self, flat, off, lens, idx, fill=0):
        ln = lens[idx]
        m = int(ln.max())
        ar = torch.arange(m)
        pos = off[idx][:, None] + ar[None, :]
        ok = ar[None, :] < ln[:, None]
        pos = torch.where(ok, pos, torch.zeros_like(pos)).to(self.device)
        ok = ok.to(self.device)
        x = flat[pos]
        if x.dim() == 3:
            return x * ok[..., None].to(x.dtype), ok
        return torch.where(ok, x, torch.full_like(x, fill)), ok

    def batch(self, idx):
        idx = torch.as_tensor(idx)
        ids, sk = self._gather(self.ids, self.s_off, self.s_len, idx)
        mels, tk = self._gather(self.mels, self.t_off, self.t_len, idx)
        out = {'ids': ids, 'sym_keep': sk, 'mels': mels.float(), 'frame_keep': tk,
               's_len': self.s_len[idx].to(self.device), 't_len': self.t_len[idx].to(self.device),
               'pos': torch.where(sk, torch.arange(1, sk.shape[1] + 1, device=self.device), 0),
               'mel_pos': torch.where(tk, torch.arange(1, tk.shape[1] + 1, device=self.device),
                                      0)}
        if self.dur is not None:
            dur, _ = self._gather(self.dur, self.s_off, self.s_len, idx)
            out['dur'] = dur
            # frame -> symbol: the count of symbol ends at or before each frame
            ends = dur.cumsum(1)                                         # (B, S)
            fr = torch.arange(tk.shape[1], device=self.device)[None, :, None]
            ft = (ends[:, None, :] <= fr).sum(2)                         # (B, T)
            out['frame_tok'] = torch.where(tk, ft.clamp_max(ids.shape[1] - 1), 0)
        return out

    def batches(self, max_frames, rng, max_items=256):
        """Lists of indices: sorted by frames, cut into batches of at most max_frames padded
        frames, shuffled."""
        order = sorted(range(self.n), key=lambda i: (int(self.t_len[i]), rng.random()))
        out, cur, longest = [], [], 0
        for i in order:
            tl = int(self.t_len[i])
            if cur and (max(longest, tl) * (len(cur) + 1) > max_frames or len(cur) >= max_items):
                out.append(cur)
                cur, longest = [], 0
            cur.append(i)
            longest = max(longest, tl)
        if cur:
            out.append(cur)
        rng.shuffle(out)
        return out


# ---- training ----------------------------------------------------------------------------------

def log(exp, rec):
    rec['time'] = round(time.time(), 1)
    print(json.dumps(rec), flush=True)
    with open(os.path.join(exp, 'log.jsonl'), 'a') as f:
        f.write(json.dumps(rec) + '\n')


def amp(device):
    if device == 'cuda':
        return torch.autocast('cuda', dtype=torch.bfloat16)
    return torch.autocast('cpu', enabled=False)


def train_aligner(a, data, device, deadline):
    """Trains the aligner until its step budget or the deadline; returns it."""
    torch.manual_seed(a.seed)
    al = Aligner().to(device)
    opt = torch.optim.AdamW(al.parameters(), lr=a.aligner_lr, weight_decay=1e-6)
    rng = random.Random(a.seed)
    step, t0, loss = 0, time.time(), torch.tensor(float('nan'))
    while step < a.aligner_steps and time.time() < deadline:
        for idx in data.batches(a.aligner_frames, rng):
            b = data.batch(idx)
            prior = beta_binomial_log_prior(b['s_len'], b['t_len'], b['ids'].shape[1],
                                            b['mels'].shape[1], device)
            with amp(device):
                lp = al(b['ids'], (b['mels'] - data.mean) / data.std, b['sym_keep'], prior)
            loss = forward_sum_loss(lp.float(), b['s_len'], b['t_len'])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(al.parameters(), 1.0)
            opt.step()
            step += 1
            if step % 50 == 0 or step == 1:
                log(a.exp, {'phase': 'aligner', 'step': step, 'loss': round(loss.item(), 4),
                            's': round(time.time() - t0, 1)})
            if step >= a.aligner_steps or time.time() >= deadline:
                break
    torch.save({'step': step, 'model': al.state_dict()}, os.path.join(a.exp, 'aligner.pt'))
    log(a.exp, {'phase': 'aligner', 'done': step, 'loss': round(loss.item(), 4),
                's': round(time.time() - t0, 1)})
    return al


@torch.no_grad()
def align_all(al, data, device, frames=60000):
    """Durations of every utterance (list of CPU long tensors, in data order)."""
    al.eval()
    out = [None] * data.n
    rng = random.Random(0)
    for idx in data.batches(frames, rng, max_items=128):
        b = data.batch(idx)
        prior = beta_binomial_log_prior(b['s_len'], b['t_len'], b['ids'].shape[1],
                                        b['mels'].shape[1], device)
        with amp(device):
            lp = al(b['ids'], (b['mels'] - data.mean) / data.std, b['sym_keep'], prior)
        dur = monotonic_alignment(lp.float(), b['s_len'], b['t_len']).cpu()
        for r, i in enumerate(idx):
            out[i] = dur[r, :int(data.s_len[i])].clone()
    for i in range(data.n):
        assert int(out[i].sum()) == int(data.t_len[i]) and int(out[i].min()) >= 1, data.keys[i]
    return out


def pause_contrast(data, durs):
    """Mean log-mel level of the frames aligned to ',' '.' ';' ':' '?' '!' minus that of the
    frames aligned to letters: strongly negative when the pauses land on the punctuation that
    makes them (a check of the alignment that needs no reference)."""
    punct = torch.tensor([CHARS_PUNCT], dtype=torch.long)
    lev = data.mels.float().mean(1).cpu()
    dur = torch.cat(durs)
    ids = data.ids.cpu()
    tok = torch.repeat_interleave(ids, dur)
    is_p = (tok[:, None] == punct).any(1)
    is_l = tok >= 12
    if not is_p.any() or not is_l.any():
        return None
    return round(float(lev[is_p].mean() - lev[is_l].mean()), 3)


CHARS_PUNCT = [2, 6, 7, 8, 9, 10]  # ! , . : ; ? in DLE's symbols


def lr_at(a, step, seconds):
    """Linear warm-up over --warmup steps of this optimizer (step counts from its start), then
    cosine from --lr to 5% of it over --total-minutes of training seconds."""
    warm = min(1.0, (step + 1) / a.warmup)
    frac = min(1.0, seconds / (a.total_minutes * 60))
    return a.lr * warm * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))


def losses(model, b):
    mel, logd = model(b['ids'], b['pos'], b['frame_tok'], b['mel_pos'])
    fk = b['frame_keep'].unsqueeze(-1).float()
    mel_loss = ((mel.float() - b['mels']).abs() * fk).sum() / (fk.sum() * mel.shape[-1])
    sk = b['sym_keep'].float()
    dl = ((logd.float() - torch.log(b['dur'].float() + 1)) ** 2 * sk).sum() / sk.sum()
    return mel_loss, dl


RUN_OPTIONS = {'lr': 1e-3, 'warmup': 400, 'batch_frames': 40000}


def train(a):
    t_start = time.time()
    deadline = t_start + a.minutes * 60 - a.save_margin
    device = 'cuda' if torch.cuda.is_available() and not a.cpu else 'cpu'
    if device == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    os.makedirs(a.exp, exist_ok=True)
    h = dict(SIZES[a.size])
    data = Data(os.path.join(a.data, 'train.pt'), device)
    test_path = os.path.join(a.data, 'test.pt')
    test = Data(test_path, device) if os.path.exists(test_path) else None
    log(a.exp, {'phase': 'data', 'train_utts': data.n, 'train_frames': int(data.t_len.sum()),
                'device': device, 'load_s': round(time.time() - t_start, 1)})

    # durations: reuse EXP/durations.pt when its keys and lengths match, else align
    dpath = os.path.join(a.exp, 'durations.pt')
    durs = None
    if os.path.exists(dpath):
        d = torch.load(dpath)
        m = dict(zip(d['keys'], (x.long() for x in d['durations'])))
        if all(k in m and int(m[k].sum()) == int(data.t_len[i]) and len(m[k]) == int(
                data.s_len[i]) for i, k in enumerate(data.keys)):
            durs = [m[k] for k in data.keys]
    if durs is None:
        apath = os.path.join(a.exp, 'aligner.pt')
        if os.path.exists(apath):
            al = Aligner().to(device)
            al.load_state_dict(torch.load(apath, map_location=device)['model'])
        else:
            al = train_aligner(a, data, device, t_start + a.aligner_minutes * 60)
        t0 = time.time()
        durs = align_all(al, data, device)
        tdur = align_all(al, test, device) if test else []
        torch.save({'keys': data.keys + (test.keys if test else []),
                    'durations': [x.to(torch.int16) for x in durs + tdur]}, dpath)
        allv = torch.cat(durs).float()
        log(a.exp, {'phase': 'align', 's': round(time.time() - t0, 1),
                    'frames_per_symbol': round(float(allv.mean()), 3),
                    'max': int(allv.max()), 'ones': round(float((allv == 1).float().mean()), 3),
                    'pause_minus_letter': pause_contrast(data, durs)})
        if test:
            test.set_durations(tdur)
        del al
    elif test:
        d = torch.load(dpath)
        m = dict(zip(d['keys'], (x.long() for x in d['durations'])))
        if all(k in m for k in test.keys):
            test.set_durations([m[k] for k in test.keys])
    data.set_durations(durs)

    torch.manual_seed(a.seed)
    model = FastSpeech(h).to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.0,
                            betas=(0.9, 0.98), eps=1e-9, weight_decay=1e-6)
    step, seconds, step0 = 0, 0.0, 0
    rpath = os.path.join(a.exp, 'resume.pt')
    saved = {}
    if a.resume and os.path.exists(rpath):
        ck = torch.load(rpath, map_location=device)
        if ck['hparams'] != h:
            sys.exit(f'{rpath}: trained with other hyper-parameters ({ck["hparams"]})')
        model.load_state_dict(ck['model'])
        opt.load_state_dict(ck['optimizer'])
        step, seconds, step0 = ck['step'], ck['seconds'], ck.get('step0', 0)
        if a.total_minutes is None:
            a.total_minutes = ck.get('total_minutes')
        saved = ck.get('opts', {})
        log(a.exp, {'phase': 'resume', 'step': step, 'seconds': round(seconds, 1)})
    elif a.init:
        # a DLE-layout checkpoint (an earlier call's export, on a fresh machine): its weights,
        # a new optimizer with its own warm-up, and the schedule of this call's --total-minutes
        ck = torch.load(a.init, map_location=device)
        model.load_state_dict({k[len('module.'):] if k.startswith('module.') else k: v
                               for k, v in ck['model'].items()})
        step = step0 = int(ck.get('step', 0))
        log(a.exp, {'phase': 'init', 'from': a.init, 'step': step})
    for k, default in RUN_OPTIONS.items():  # a resumed run keeps its own unless named again
        if getattr(a, k) is None:
            setattr(a, k, saved.get(k, default))
    if a.total_minutes is None:  # the schedule spans what this call has left
        a.total_minutes = max(0.1, (deadline - time.time()) / 60 - 0.2)
    n_par = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log(a.exp, {'phase': 'fastspeech', 'parameters': n_par, 'hparams': h,
                'opts': {k: getattr(a, k) for k in RUN_OPTIONS},
                'total_minutes': round(a.total_minutes, 2)})
    rng = random.Random(a.seed + step)
    model.train()
    t_last, done = time.time(), False
    while not done:
        for idx in data.batches(a.batch_frames, rng):
            b = data.batch(idx)
            lr = lr_at(a, step - step0, seconds)
            for g in opt.param_groups:
                g['lr'] = lr
            with amp(device):
                mel_loss, dur_loss = losses(model, b)
            loss = mel_loss + dur_loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            now = time.time()
            seconds += now - t_last
            t_last = now
            if step % a.log_every == 0 or step == 1:
                rec = {'phase': 'fastspeech', 'step': step, 'mel_l1': round(mel_loss.item(), 4),
                       'dur_mse': round(dur_loss.item(), 4), 'lr': round(lr, 6),
                       'grad_norm': round(float(gn), 3), 'train_s': round(seconds, 1),
                       'batch': len(idx)}
                log(a.exp, rec)
            if (a.max_steps and step >= a.max_steps) or now >= deadline:
                done = True
                break
    if test and test.dur is not None:
        rec = evaluate(model, test, device)
        rec.update({'phase': 'test', 'step': step})
        log(a.exp, rec)
    torch.save({'step': step, 'seconds': seconds, 'step0': step0,
                'total_minutes': a.total_minutes, 'hparams': h,
                'opts': {k: getattr(a, k) for k in RUN_OPTIONS},
                'model': model.state_dict(), 'optimizer': opt.state_dict()}, rpath)
    log(a.exp, {'phase': 'saved', 'step': step, 'train_s': round(seconds, 1),
                'wall_s': round(time.time() - t_start, 1)})
    export(a)
    return 0


@torch.no_grad()
def evaluate(model, data, device):
    """Held-out sentences: mel L1 with the aligner's durations (teacher forcing), duration MSE,
    and the predicted length against the real one."""
    model.eval()
    rng = random.Random(0)
    tot, dl, n, lens = 0.0, 0.0, 0, []
    for idx in data.batches(40000, rng):
        b = data.batch(idx)
        with amp(device):
            mel_loss, dur_loss = losses(model, b)
        tot += mel_loss.item() * len(idx)
        dl += dur_loss.item() * len(idx)
        n += len(idx)
    for i in range(min(data.n, 20)):
        ids = data.ids[data.s_off[i]:data.s_off[i] + data.s_len[i]][None]
        with amp(device):
            _, rep = model.infer(ids)
        lens.append(int(rep.sum()) / int(data.t_len[i]))
    model.train()
    return {'test_mel_l1': round(tot / n, 4), 'test_dur_mse': round(dl / n, 4),
            'length_ratio': round(float(np.mean(lens)), 3)}


def export(a):
    """EXP/resume.pt -> EXP/fastspeech.pt (DLE's layout) + EXP/fastspeech.yaml."""
    ck = torch.load(os.path.join(a.exp, 'resume.pt'), map_location='cpu')
    sd = {'module.' + k: v.float().contiguous() for k, v in ck['model'].items()}
    torch.save({'step': ck['step'], 'model': sd}, os.path.join(a.exp, 'fastspeech.pt'))
    h = dict(ck['hparams'])
    with open(os.path.join(a.exp, 'fastspeech.yaml'), 'w') as f:
        f.write('# hark demo voice (tools/train_demo_tts.py): DLE FastSpeech hparams keys\n')
        for k, v in list(AUDIO.items()) + [('text_cleaners', "['english_cleaners']")] + \
                list(h.items()):
            f.write(f'{k}: {v}\n')
    print(f"wrote {a.exp}/fastspeech.pt (step {ck['step']}) and {a.exp}/fastspeech.yaml")
    return 0


def is_table(key):
    """the sinusoid position tables: computed from the sizes, so a half export leaves them out"""
    return key.endswith('position.weight')


def half(a):
    """EXP/fastspeech.pt -> OUT: float16, without the two sinusoid tables (so the shipped size's
    export comes back from the GPU machine under its 16 MiB a file); `fill` undoes it."""
    ck = torch.load(os.path.join(a.exp, 'fastspeech.pt'), map_location='cpu')
    torch.save({'step': ck['step'], 'model': {k: v.half() for k, v in ck['model'].items()
                                              if not is_table(k)}}, a.out)
    return 0


def fill(a):
    """A `half` export -> EXP/fastspeech.pt in float32, the tables computed again for
    EXP/fastspeech.yaml's sizes."""
    import yaml
    with open(os.path.join(a.exp, 'fastspeech.yaml')) as f:
        y = yaml.safe_load(f)
    h = {k: y[k] for k in SIZES['demo']}
    full = {'module.' + k: v for k, v in FastSpeech(h).state_dict().items()}
    ck = torch.load(a.half, map_location='cpu')
    if not set(ck['model']) <= set(full):
        sys.exit(f'{a.half}: tensors the sizes of fastspeech.yaml do not have')
    missing = sorted(set(full) - set(ck['model']))
    if not all(is_table(k) for k in missing):
        sys.exit(f'{a.half}: lacks {missing}')
    for k, v in ck['model'].items():
        if v.shape != full[k].shape:
            sys.exit(f'{a.half}: {k} is {tuple(v.shape)}, fastspeech.yaml says {tuple(full[k].shape)}')
        full[k] = v.float()
    torch.save({'step': ck['step'], 'model': full}, os.path.join(a.exp, 'fastspeech.pt'))
    print(f"wrote {a.exp}/fastspeech.pt (step {ck['step']}; {len(missing)} tables computed)")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('cmd', choices=['train', 'export', 'half', 'fill'])
    ap.add_argument('--half', help="fill: a `half` export (tools/demo_device_together.sh's)")
    ap.add_argument('--out', help='half: where to write it')
    ap.add_argument('--data', help='tools/demo_tts_data.py output')
    ap.add_argument('--exp', required=True)
    ap.add_argument('--size', default='demo', choices=sorted(SIZES))
    ap.add_argument('--minutes', type=float, default=9.0, help='wall time of this call')
    ap.add_argument('--total-minutes', type=float, default=None,
                    help='FastSpeech training time of the whole run, over all calls (the LR '
                         'schedule; default: what the first call has left after the aligner)')
    ap.add_argument('--save-margin', type=float, default=20.0, help='seconds kept for saving')
    ap.add_argument('--resume', action='store_true', help='continue from EXP/resume.pt')
    ap.add_argument('--init', help="else start from this DLE-layout checkpoint (export's)")
    ap.add_argument('--cpu', action='store_true', help='even when CUDA is there')
    ap.add_argument('--seed', type=int, default=22)
    # RUN_OPTIONS: None = the resumed run's value, else the default there
    ap.add_argument('--lr', type=float, default=None, help='peak learning rate (1e-3)')
    ap.add_argument('--warmup', type=int, default=None, help='warm-up steps (400)')
    ap.add_argument('--batch-frames', type=int, default=None,
                    help='padded frames per batch (40000)')
    ap.add_argument('--max-steps', type=int, default=0)
    ap.add_argument('--log-every', type=int, default=100)
    ap.add_argument('--aligner-minutes', type=float, default=1.5)
    ap.add_argument('--aligner-steps', type=int, default=3000)
    ap.add_argument('--aligner-frames', type=int, default=40000)
    ap.add_argument('--aligner-lr', type=float, default=1e-3)
    a = ap.parse_args(argv)
    if a.cmd == 'export':
        return export(a)
    if a.cmd == 'fill':
        return fill(a)
    if a.cmd == 'half':
        if not a.out:
            ap.error('half needs --out')
        return half(a)
    if not a.data:
        ap.error('train needs --data')
    return train(a)


if __name__ == '__main__':
    sys.exit(main())
