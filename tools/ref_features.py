#!/usr/bin/env python3
"""Python reference for hark's speech feature front ends (fbank, nemo-mel, tts-mel).

Each function recomputes one original front end in float32, step for step; docs/features.md
describes the pipelines. The C feature tests compare against the .npy files this tool writes.

Usage:
  /usr/bin/python3 tools/ref_features.py --kind fbank|nemo-mel|tts-mel [--num-mel-bins N]
      [--variant hifigan|tacotron2] [--melbank librosa|torchaudio] INPUT.wav|INPUT.npy OUT.npy

INPUT.npy is a 1-D float32 array of samples in [-1, 1]. OUT.npy is float32 (frames, bins).
The functions are importable (bench/bench_features_torch.py uses them).
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np
import torch

try:  # torchaudio >= 2.9 dropped many APIs; the mel front ends do not need it
    import torchaudio
    import torchaudio.compliance.kaldi
    import torchaudio.functional
except ImportError:  # pragma: no cover
    torchaudio = None

# --------------------------------------------------------------------------------------------
# Slaney mel filterbank (librosa.filters.mel with htk=False, norm='slaney')
# --------------------------------------------------------------------------------------------

_SLANEY_F_SP = 200.0 / 3.0  # Hz per mel below 1 kHz
_SLANEY_MIN_LOG_HZ = 1000.0
_SLANEY_MIN_LOG_MEL = _SLANEY_MIN_LOG_HZ / _SLANEY_F_SP  # = 15
_SLANEY_LOGSTEP = math.log(6.4) / 27.0


def hz_to_mel_slaney(f):
    """Slaney mel scale: linear below 1 kHz, logarithmic above (float64)."""
    f = np.asarray(f, dtype=np.float64)
    lin = f / _SLANEY_F_SP
    with np.errstate(divide="ignore"):
        log = _SLANEY_MIN_LOG_MEL + np.log(np.maximum(f, 1e-300) / _SLANEY_MIN_LOG_HZ) / _SLANEY_LOGSTEP
    return np.where(f >= _SLANEY_MIN_LOG_HZ, log, lin)


def mel_to_hz_slaney(m):
    m = np.asarray(m, dtype=np.float64)
    lin = _SLANEY_F_SP * m
    log = _SLANEY_MIN_LOG_HZ * np.exp(_SLANEY_LOGSTEP * (m - _SLANEY_MIN_LOG_MEL))
    return np.where(m >= _SLANEY_MIN_LOG_MEL, log, lin)


def mel_filterbank_librosa(sr, n_fft, n_mels, fmin, fmax):
    """Own numpy re-implementation of librosa.filters.mel(htk=False, norm='slaney').

    Like librosa: centre and bin frequencies in float64, triangle weights written into a
    float32 array, then scaled in place by the float64 area norm 2/(f[i+2]-f[i]).
    Returns float32 (n_mels, 1 + n_fft//2).
    """
    n_freqs = 1 + n_fft // 2
    bin_hz = np.linspace(0.0, float(sr) / 2.0, n_freqs, endpoint=True)  # (n_freqs,)
    mel_pts = np.linspace(hz_to_mel_slaney(fmin), hz_to_mel_slaney(fmax), n_mels + 2)
    edge_hz = mel_to_hz_slaney(mel_pts)  # (n_mels+2,)
    width = np.diff(edge_hz)  # (n_mels+1,)
    dist = edge_hz[:, None] - bin_hz[None, :]  # (n_mels+2, n_freqs)
    w = np.zeros((n_mels, n_freqs), dtype=np.float32)
    for i in range(n_mels):
        rising = -dist[i] / width[i]
        falling = dist[i + 2] / width[i + 1]
        w[i] = np.maximum(0.0, np.minimum(rising, falling))
    area = 2.0 / (edge_hz[2:n_mels + 2] - edge_hz[:n_mels])
    w *= area[:, None]
    return w


def mel_filterbank_torchaudio(sr, n_fft, n_mels, fmin, fmax):
    """The same matrix from torchaudio (float32 arithmetic). Returns (n_mels, 1 + n_fft//2)."""
    fb = torchaudio.functional.melscale_fbanks(1 + n_fft // 2, float(fmin), float(fmax), n_mels,
                                               int(sr), norm="slaney", mel_scale="slaney")
    return fb.t().contiguous().numpy()


MELBANK_IMPL = "librosa"  # which of the two builders the front ends use (--melbank)
_cache = {}


def _melbank(sr, n_fft, n_mels, fmin, fmax, device):
    key = ("mel", MELBANK_IMPL, sr, n_fft, n_mels, float(fmin), float(fmax), str(device))
    if key not in _cache:
        build = mel_filterbank_librosa if MELBANK_IMPL == "librosa" else mel_filterbank_torchaudio
        _cache[key] = torch.from_numpy(build(sr, n_fft, n_mels, fmin, fmax)).to(device)
    return _cache[key]


def _cached(key, make):
    if key not in _cache:
        _cache[key] = make()
    return _cache[key]


# --------------------------------------------------------------------------------------------
# fbank: WeNet wenet/dataset/processor.py compute_fbank -> torchaudio.compliance.kaldi.fbank
# --------------------------------------------------------------------------------------------


def fbank_wenet(wave, num_mel_bins=80):
    """wave: (N,) float32 tensor in [-1, 1] (any device). Returns (T, num_mel_bins) float32,
    T = 1 + (N - 400) // 160; torchaudio raises for N < 400."""
    x = wave.reshape(1, -1) * (1 << 15)
    return torchaudio.compliance.kaldi.fbank(x, num_mel_bins=num_mel_bins, frame_length=25,
                                             frame_shift=10, dither=0.0, energy_floor=0.0,
                                             sample_frequency=16000)


# --------------------------------------------------------------------------------------------
# nemo-mel: NVIDIA DeepLearningExamples PyTorch/SpeechRecognition/Jasper common/features.py
# FilterbankFeatures with configs/jasper10x5dr_speedp-online_speca.yaml input_val values
# --------------------------------------------------------------------------------------------

JASPER = dict(sample_rate=16000, window_size=0.02, window_stride=0.01, n_fft=512, n_filt=64,
              preemph=0.97, lowfreq=0.0, highfreq=None, log_guard=1e-20, std_eps=1e-5,
              pad_align=16)


def jasper_seq_len(n_samples, hop=160):
    """Valid frames: ceil(N / hop), computed like the original (float32 division, ceil)."""
    n = torch.as_tensor(n_samples)
    return torch.ceil(n.to(torch.float) / hop).to(torch.int)


def nemo_mel_jasper_batch(audio, audio_lens, n_filt=64, vectorized_norm=False):
    """audio: (B, N) float32 in [-1, 1]; audio_lens: (B,) int. Returns (feats (B, n_filt, T),
    seq_len (B,) int32) with T = 1 + N // 160 stft frames; frames >= seq_len are zeroed.
    No pad_align padding (the caller trims to seq_len anyway). Dither is 0.
    vectorized_norm replaces the original's per-row loop by masked sums (benchmark only)."""
    c = JASPER
    sr = c["sample_rate"]
    win_length = int(sr * c["window_size"])  # 320
    hop = int(sr * c["window_stride"])  # 160
    n_fft = c["n_fft"] or 2 ** math.ceil(math.log2(win_length))
    highfreq = c["highfreq"] or sr / 2
    dev = audio.device
    window = _cached(("hann_sym", win_length, str(dev)),
                     lambda: torch.hann_window(win_length, periodic=False).to(dev))
    fb = _melbank(sr, n_fft, n_filt, c["lowfreq"], highfreq, dev).unsqueeze(0)  # (1, F, n_freqs)

    x = audio.float()
    seq_len = jasper_seq_len(audio_lens.to(dev), hop)
    # pre-emphasis over the whole (padded) row, first sample kept
    x = torch.cat((x[:, 0].unsqueeze(1), x[:, 1:] - c["preemph"] * x[:, :-1]), dim=1)
    # torch.stft defaults: center=True, pad_mode='reflect', onesided, not normalized;
    # the 320-tap window is zero-padded to 512 at offset (512-320)//2 = 96
    spec = torch.stft(x, n_fft=n_fft, hop_length=hop, win_length=win_length, window=window,
                      return_complex=True)
    x = torch.view_as_real(spec).pow(2).sum(-1)  # power (B, n_freqs, T)
    x = torch.matmul(fb.to(x.dtype), x)  # (B, F, T)
    x = torch.log(x + c["log_guard"])
    # per_feature normalisation: mean / unbiased std over the valid frames, std += 1e-5
    if vectorized_norm:  # benchmark variant: masked sums, no per-row loop (same maths)
        valid = (torch.arange(x.size(-1), device=dev)[None, :] < seq_len[:, None]).unsqueeze(1)
        cnt = seq_len.to(x.dtype)[:, None]
        x_mean = torch.where(valid, x, torch.zeros_like(x)).sum(-1) / cnt
        d = torch.where(valid, x - x_mean.unsqueeze(2), torch.zeros_like(x))
        x_std = torch.sqrt(d.pow(2).sum(-1) / (cnt - 1))
    else:
        x_mean = torch.zeros((seq_len.shape[0], x.shape[1]), dtype=x.dtype, device=dev)
        x_std = torch.zeros((seq_len.shape[0], x.shape[1]), dtype=x.dtype, device=dev)
        for i in range(x.shape[0]):
            x_mean[i, :] = x[i, :, :seq_len[i]].mean(dim=1)
            x_std[i, :] = x[i, :, :seq_len[i]].std(dim=1)
    x_std += c["std_eps"]
    x = (x - x_mean.unsqueeze(2)) / x_std.unsqueeze(2)
    max_len = x.size(-1)
    mask = torch.arange(max_len, dtype=seq_len.dtype, device=dev)
    mask = mask.expand(x.size(0), max_len) >= seq_len.unsqueeze(1)
    x = x.masked_fill(mask.unsqueeze(1), 0)
    return x, seq_len


def nemo_mel_jasper(wave, n_filt=64):
    """wave: (N,) float32 tensor, N >= 257 (reflect pad). Returns (ceil(N / 160), n_filt)."""
    feats, seq_len = nemo_mel_jasper_batch(wave.reshape(1, -1),
                                           torch.tensor([wave.numel()]), n_filt)
    return feats[0, :, :int(seq_len[0])].t().contiguous()


# --------------------------------------------------------------------------------------------
# tts-mel
# --------------------------------------------------------------------------------------------

TTS = dict(n_fft=1024, num_mels=80, sampling_rate=22050, hop_size=256, win_size=1024, fmin=0.0,
           fmax=8000.0, clip_val=1e-5)


def tts_mel_hifigan_batch(y, num_mels=80):
    """jik876/hifi-gan meldataset.py mel_spectrogram(..., center=False).
    y: (B, N) float32 in [-1, 1]. Returns (B, num_mels, T), T = 1 + (N + 2*384 - 1024) // 256."""
    c = TTS
    n_fft, hop, win = c["n_fft"], c["hop_size"], c["win_size"]
    dev = y.device
    window = _cached(("hann_per", win, str(dev)), lambda: torch.hann_window(win).to(dev))
    fb = _melbank(c["sampling_rate"], n_fft, num_mels, c["fmin"], c["fmax"], dev)
    pad = int((n_fft - hop) / 2)  # 384
    y = torch.nn.functional.pad(y.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spec = torch.stft(y, n_fft, hop_length=hop, win_length=win, window=window, center=False,
                      pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
    spec = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)  # magnitude
    spec = torch.matmul(fb, spec)
    return torch.log(torch.clamp(spec, min=c["clip_val"]))


def _scipy_hann_periodic(m):
    """scipy.signal.get_window('hann', m, fftbins=True): general_cosine [0.5, 0.5] on
    linspace(-pi, pi, m+1), last point dropped (float64)."""
    fac = np.linspace(-np.pi, np.pi, m + 1)
    w = np.zeros(m + 1)
    w += 0.5 * np.cos(0 * fac)
    w += 0.5 * np.cos(1 * fac)
    return w[:m]


def _tacotron2_forward_basis(filter_length, win_length, dev):
    """DLE Tacotron2 tacotron2_common/stft.py STFT: rows 0..n_fft/2 of the real and the imaginary
    part of the DFT matrix (float64 -> float32), times the periodic hann window (float32),
    centred in filter_length. Returns (2*(n_fft/2+1), 1, n_fft) float32."""
    def make():
        dft = np.fft.fft(np.eye(filter_length))
        cutoff = int(filter_length / 2 + 1)
        basis = np.vstack([np.real(dft[:cutoff, :]), np.imag(dft[:cutoff, :])])
        basis = torch.from_numpy(np.ascontiguousarray(basis[:, None, :])).float()
        assert filter_length >= win_length
        w = np.zeros(filter_length)
        left = (filter_length - win_length) // 2
        w[left:left + win_length] = _scipy_hann_periodic(win_length)
        basis *= torch.from_numpy(w).float()
        return basis.to(dev)
    return _cached(("taco_basis", filter_length, win_length, str(dev)), make)


def tts_mel_tacotron2_batch(y, num_mels=80):
    """DLE Tacotron2 TacotronSTFT.mel_spectrogram. y: (B, N) float32 in [-1, 1].
    Returns (B, num_mels, T), T = 1 + N // 256 (reflect pad 512 each side, conv1d stride 256)."""
    c = TTS
    n_fft, hop, win = c["n_fft"], c["hop_size"], c["win_size"]
    dev = y.device
    basis = _tacotron2_forward_basis(n_fft, win, dev)
    fb = _melbank(c["sampling_rate"], n_fft, num_mels, c["fmin"], c["fmax"], dev)
    b, n = y.shape
    x = y.reshape(b, 1, n)
    x = torch.nn.functional.pad(x, (int(n_fft / 2), int(n_fft / 2)), mode="reflect")
    ft = torch.nn.functional.conv1d(x, basis, stride=hop, padding=0)  # (B, 2*cutoff, T)
    cutoff = int(n_fft / 2 + 1)
    re, im = ft[:, :cutoff, :], ft[:, cutoff:, :]
    mag = torch.sqrt(re ** 2 + im ** 2)
    mel = torch.matmul(fb, mag)
    return torch.log(torch.clamp(mel, min=c["clip_val"]) * 1)


def tts_mel(wave, variant="hifigan", num_mels=80):
    """wave: (N,) float32 tensor at 22050 Hz. Returns (T, num_mels)."""
    f = tts_mel_hifigan_batch if variant == "hifigan" else tts_mel_tacotron2_batch
    return f(wave.reshape(1, -1), num_mels)[0].t().contiguous()


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def load_input(path):
    """Returns ((N,) float32 tensor, sample rate or None for .npy). First channel of a wav."""
    if path.endswith(".npy"):
        a = np.load(path)
        if a.ndim != 1:
            sys.exit(f"ref_features: {path}: expected a 1-D array, got shape {a.shape}")
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)), None
    try:
        wav, sr = torchaudio.load(path)  # (C, N) float32 in [-1, 1]
        return wav[0].contiguous(), sr
    except Exception:  # torchaudio >= 2.9 without torchcodec: 16-bit PCM via the stdlib
        return read_wav_pcm16(path)


def read_wav_pcm16(path):
    """16-bit PCM WAV with the stdlib: ((N,) float32 tensor = int16 / 32768, first channel, sr)."""
    import wave
    with wave.open(path, "rb") as f:
        if f.getsampwidth() != 2:
            sys.exit(f"ref_features: {path}: only 16-bit PCM without torchaudio.load")
        ch, sr, n = f.getnchannels(), f.getframerate(), f.getnframes()
        pcm = np.frombuffer(f.readframes(n), dtype="<i2").reshape(-1, ch)[:, 0]
    return torch.from_numpy(pcm.astype(np.float32) / 32768.0), sr


def compute(kind, wave, sr=None, num_mel_bins=None, variant="hifigan"):
    """Returns (T, bins) float32 numpy for one utterance."""
    if kind == "fbank":
        if sr is not None and sr != 16000:
            print(f"ref_features: warning: fbank expects 16000 Hz, input is {sr} Hz "
                  "(not resampled, as WeNet would not)", file=sys.stderr)
        out = fbank_wenet(wave, num_mel_bins or 80)
    elif kind == "nemo-mel":
        if sr is not None and sr != 16000:
            print(f"ref_features: warning: nemo-mel expects 16000 Hz, input is {sr} Hz "
                  "(not resampled)", file=sys.stderr)
        out = nemo_mel_jasper(wave, num_mel_bins or 64)
    elif kind == "tts-mel":
        if sr is not None and sr != TTS["sampling_rate"]:
            print(f"ref_features: warning: resampling {sr} Hz -> {TTS['sampling_rate']} Hz "
                  "with torchaudio.functional.resample", file=sys.stderr)
            wave = torchaudio.functional.resample(wave, sr, TTS["sampling_rate"])
        out = tts_mel(wave, variant, num_mel_bins or 80)
    else:
        raise ValueError(kind)
    return out.numpy().astype(np.float32, copy=False)


def main(argv=None):
    global MELBANK_IMPL
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", required=True, choices=["fbank", "nemo-mel", "tts-mel"])
    ap.add_argument("--num-mel-bins", type=int, default=None,
                    help="fbank 80, nemo-mel 64, tts-mel 80 by default")
    ap.add_argument("--variant", default="hifigan", choices=["hifigan", "tacotron2"],
                    help="tts-mel only")
    ap.add_argument("--melbank", default="librosa", choices=["librosa", "torchaudio"],
                    help="slaney mel matrix builder for nemo-mel/tts-mel (default: librosa "
                    "re-implementation; the torchaudio matrix differs by up to ~1e-7, "
                    "which moves the output by up to ~5e-5)")
    ap.add_argument("input")
    ap.add_argument("output")
    a = ap.parse_args(argv)
    MELBANK_IMPL = a.melbank
    torch.set_num_threads(1)
    with torch.no_grad():
        wave, sr = load_input(a.input)
        out = compute(a.kind, wave, sr, a.num_mel_bins, a.variant)
    np.save(a.output, out)
    print(f"ref_features: {a.kind} {a.input}: {out.shape[0]} frames x {out.shape[1]} bins "
          f"-> {a.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
