"""demo_fbank.py — Kaldi fbank (WeNet's recipe: 80 bins, 25 ms / 10 ms frames, povey window,
DC removal, pre-emphasis 0.97, power spectrum, 20 Hz .. Nyquist, log with float32 epsilon floor,
snip_edges) for a batch of waveforms on the GPU, in PyTorch, for tools/train_demo.py.

WeNet trains on torchaudio.compliance.kaldi.fbank and hark computes the same features in C
(`hark features --kind fbank`); tests/model/wenet/test_demo_fbank.py checks this module against
hark's output, so the demo model is trained on the features hark feeds it.
"""
import math

import torch

FRAME, SHIFT, NFFT = 400, 160, 512
EPS = 1.1920928955078125e-07  # float32 epsilon, Kaldi's log floor


def mel_banks(bins=80, rate=16000, low=20.0, high=0.0, device=None):
    """(NFFT // 2 + 1, bins) triangular filters on Kaldi's mel scale (1127 ln(1 + f / 700)); the
    Nyquist row is zero, as in Kaldi (it builds NFFT / 2 columns)."""
    nyq = rate / 2
    high = high if high > 0 else nyq + high
    mel = lambda f: 1127.0 * math.log(1.0 + f / 700.0)
    lo, hi = mel(low), mel(high)
    step = (hi - lo) / (bins + 1)
    fft_mel = 1127.0 * torch.log1p(torch.arange(NFFT // 2, dtype=torch.float64) * (rate / NFFT)
                                   / 700.0)
    w = torch.zeros(NFFT // 2 + 1, bins, dtype=torch.float64)
    for m in range(bins):
        left, center, right = lo + m * step, lo + (m + 1) * step, lo + (m + 2) * step
        up = (fft_mel - left) / (center - left)
        down = (right - fft_mel) / (right - center)
        w[: NFFT // 2, m] = torch.clamp(torch.minimum(up, down), min=0.0)
    return w.to(torch.float32).to(device)


def warp_banks(banks, alpha):
    """Vocal tract length perturbation (Jaitly & Hinton 2013): (B, NFFT // 2 + 1, bins) filters,
    one set per utterance, from `banks` and a (B,) tensor of warp factors. An utterance's filters
    weigh frequency f as the unwarped ones weigh phi(f): phi(f) = alpha f up to a boundary
    (0.8 Nyquist / max(alpha, 1)), then a straight line to Nyquist, which stays put; so a sound at
    f lands in the bins of alpha f, as if its speaker's formants were alpha times higher. A
    factor of 1 gives `banks` back exactly."""
    n = banks.shape[0]  # FFT bins 0 .. N, N at Nyquist; frequencies below in bins
    N = n - 1
    alpha = alpha.to(torch.float64).view(-1, 1)
    k = torch.arange(n, dtype=torch.float64, device=alpha.device).view(1, -1)
    b = 0.8 * N / torch.clamp(alpha, min=1.0)
    pos = torch.where(k <= b, alpha * k, alpha * b + (k - b) * ((N - alpha * b) / (N - b)))
    pos = torch.where(alpha == 1.0, k, pos)  # the bin read
    lo = pos.floor()
    frac = (pos - lo).to(banks.dtype).unsqueeze(2)
    lo = lo.long()
    hi = torch.clamp(lo + 1, max=N)
    base = banks.to(alpha.device)
    return base[lo] * (1 - frac) + base[hi] * frac


def povey(device=None):
    n = torch.arange(FRAME, dtype=torch.float64)
    return (0.5 - 0.5 * torch.cos(2 * math.pi * n / (FRAME - 1))).pow(0.85).to(torch.float32).to(
        device)


def num_frames(samples):
    """frames of a waveform of `samples` samples (snip_edges): 0 when shorter than one frame"""
    return 0 if samples < FRAME else 1 + (samples - FRAME) // SHIFT


def fbank(wave, lengths, banks, window, dither=0.0):
    """wave: (B, T) float32 in int16 scale; lengths: (B,) samples; banks: mel_banks()'s filters,
    or (B, ...) of them, one set per utterance (warp_banks); dither: a number, or a (B,)
    tensor (each utterance's own: 0 gives it the undithered features inference computes).
    Returns feats (B, F, bins) and frame counts (B,). Frames past an utterance's end are
    zeroed."""
    B, T = wave.shape
    F = num_frames(T)
    frames = wave.unfold(1, FRAME, SHIFT)[:, :F]  # (B, F, 400), a view
    if torch.is_tensor(dither):
        frames = frames + dither.to(frames.dtype).view(B, 1, 1) * torch.randn_like(frames)
    elif dither > 0:
        frames = frames + dither * torch.randn_like(frames)
    frames = frames - frames.mean(dim=2, keepdim=True)
    pre = torch.cat([frames[:, :, :1] * (1 - 0.97), frames[:, :, 1:] - 0.97 * frames[:, :, :-1]],
                    dim=2)
    spec = torch.fft.rfft(pre * window, n=NFFT)
    power = spec.real.square() + spec.imag.square()
    feats = torch.log(torch.clamp(power @ banks, min=EPS))
    nf = torch.clamp((lengths - FRAME) // SHIFT + 1, min=0)
    mask = torch.arange(F, device=wave.device)[None, :] < nf[:, None]
    return feats * mask[:, :, None], nf
