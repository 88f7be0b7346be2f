#!/usr/bin/env python3
"""PyTorch/torchaudio baseline of the feature benchmark: fbank, nemo-mel and tts-mel timed on
one CPU thread and, when CUDA is available, on a GPU batch. One line per measurement.

Usage: python3 bench/bench_features_torch.py [--cpu-only|--gpu-only] [--batch 64]
           [--seconds 10] [--runs 20] [--gpu-runs 10] [--json]
Runs under torch 1.13 (Debian) and torch 2.x; needs only torch, torchaudio and numpy.
The front ends are the references in tools/ref_features.py (docs/features.md).
"""

import argparse
import json
import os
import statistics
import sys
import time
import wave

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import ref_features as ref  # noqa: E402

JFK = os.path.join(ROOT, "..", "shared", "data", "audio", "en", "wav", "jfk.wav")


def load_signal(seconds, sr=16000):
    """(N,) int16 numpy, N = seconds*sr: jfk.wav (16 kHz mono int16) tiled to length if present,
    else uniform noise. Returns (pcm, name)."""
    n = int(round(seconds * sr))
    if os.path.exists(JFK):
        with wave.open(JFK, "rb") as f:
            if f.getframerate() == sr and f.getsampwidth() == 2:
                ch = f.getnchannels()
                pcm = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
                pcm = pcm.reshape(-1, ch)[:, 0]
                return np.resize(pcm, n).astype(np.int16), "jfk"
    rng = np.random.default_rng(0)
    return rng.integers(-8000, 8000, size=n, dtype=np.int16), "noise"


def to_22050(x16k):
    """(N,) float32 tensor at 16 kHz -> 22050 Hz (torchaudio resample, else linear interp)."""
    try:
        return ref.torchaudio.functional.resample(x16k, 16000, 22050)
    except Exception:
        n_out = int(x16k.numel() * 22050 // 16000)
        t = np.arange(n_out) * (16000.0 / 22050.0)
        return torch.from_numpy(np.interp(t, np.arange(x16k.numel()), x16k.numpy())
                                .astype(np.float32))


class Report:
    def __init__(self, as_json, common):
        self.as_json = as_json
        self.common = common

    def emit(self, **m):
        rec = dict(self.common)
        rec.update(m)
        if self.as_json:
            print(json.dumps(rec), flush=True)
        else:
            print(f"{rec['device']:4s} {rec['kind']:28s} batch {rec['batch']:3d}  "
                  f"median {rec['median_ms']:9.3f} ms  {rec['ms_per_utt']:8.3f} ms/utt  "
                  f"RTFx {rec['rtfx']:9.1f}  ({rec['frames']}x{rec['bins']}, "
                  f"{rec['runs']} runs, {rec['note']})", flush=True)


def summarize(times_ms, batch, seconds):
    med = statistics.median(times_ms)
    per_utt = med / batch
    return dict(median_ms=round(med, 4), min_ms=round(min(times_ms), 4),
                max_ms=round(max(times_ms), 4), runs=len(times_ms),
                ms_per_utt=round(per_utt, 4), rtf=per_utt / 1000.0 / seconds,
                rtfx=seconds * 1000.0 / per_utt)


def time_cpu(fn, runs, warmup=3):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def time_cuda(fn, runs, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b))
    return out


def cpu_benchmarks(rep, pcm, seconds, runs):
    torch.set_num_threads(1)
    x16 = torch.from_numpy(pcm.astype(np.float32) / 32768.0)
    x22 = to_22050(x16)
    cases = [
        ("fbank", lambda: ref.fbank_wenet(x16, 80), seconds),
        ("nemo-mel", lambda: ref.nemo_mel_jasper(x16, 64), seconds),
        ("tts-mel/hifigan", lambda: ref.tts_mel(x22, "hifigan", 80), seconds),
        ("tts-mel/tacotron2", lambda: ref.tts_mel(x22, "tacotron2", 80), seconds),
    ]
    for kind, fn, secs in cases:
        if kind == "fbank" and ref.torchaudio is None:
            print(f"skip cpu {kind}: torchaudio not importable", file=sys.stderr)
            continue
        with torch.no_grad():
            out = fn()
            t = time_cpu(fn, runs)
        rep.emit(device="cpu", threads=1, kind=kind, batch=1, frames=out.shape[0],
                 bins=out.shape[1], note="single utterance, PCM already float32 on host",
                 **summarize(t, 1, secs))


def gpu_benchmarks(rep, pcm, seconds, batch, runs):
    dev = torch.device("cuda")
    # (B, N) int16 PCM in pinned host memory; row i is the signal rotated by i*997 samples
    rows = np.stack([np.roll(pcm, i * 997) for i in range(batch)])
    host16 = torch.from_numpy(rows).pin_memory()
    x22 = to_22050(torch.from_numpy(pcm.astype(np.float32) / 32768.0))
    rows22 = np.stack([np.roll(x22.numpy(), i * 997) for i in range(batch)])
    host22 = torch.from_numpy((rows22 * 32768.0).round().clip(-32768, 32767).astype(np.int16))
    host22 = host22.pin_memory()
    lens = torch.full((batch,), host16.shape[1], dtype=torch.int64)
    note = "includes int16 PCM host->device copy and /32768 on device"

    def fbank_loop():
        outs = []
        for i in range(batch):
            x = host16[i].to(dev, non_blocking=True).float() / 32768.0
            outs.append(ref.fbank_wenet(x, 80))
        return outs

    def nemo_batched(vectorized):
        def run():
            x = host16.to(dev, non_blocking=True).float() / 32768.0
            return ref.nemo_mel_jasper_batch(x, lens, 64, vectorized_norm=vectorized)
        return run

    def tts_batched(variant):
        f = ref.tts_mel_hifigan_batch if variant == "hifigan" else ref.tts_mel_tacotron2_batch

        def run():
            x = host22.to(dev, non_blocking=True).float() / 32768.0
            return f(x, 80)
        return run

    cases = []
    if ref.torchaudio is not None:
        cases.append(("fbank (kaldi.fbank loop)", fbank_loop,
                      lambda o: (o[0].shape[0], o[0].shape[1])))
    else:
        print("skip gpu fbank: torchaudio not importable", file=sys.stderr)
    cases += [
        ("nemo-mel (batched, orig norm)", nemo_batched(False),
         lambda o: (int(o[1][0]), o[0].shape[1])),
        ("nemo-mel (batched, vec norm)", nemo_batched(True),
         lambda o: (int(o[1][0]), o[0].shape[1])),
        ("tts-mel/hifigan (batched)", tts_batched("hifigan"), lambda o: (o.shape[2], o.shape[1])),
        ("tts-mel/tacotron2 (batched)", tts_batched("tacotron2"),
         lambda o: (o.shape[2], o.shape[1])),
    ]
    for kind, fn, shape in cases:
        with torch.no_grad():
            out = fn()
            torch.cuda.synchronize()
            t = time_cuda(fn, runs)
        frames, bins = shape(out)
        rep.emit(device="cuda", threads=torch.get_num_threads(), kind=kind, batch=batch,
                 frames=frames, bins=bins, note=note, **summarize(t, batch, seconds))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--cpu-only", action="store_true")
    g.add_argument("--gpu-only", action="store_true")
    ap.add_argument("--batch", type=int, default=64, help="GPU batch (default 64)")
    ap.add_argument("--seconds", type=float, default=10.0, help="utterance length (default 10)")
    ap.add_argument("--runs", type=int, default=20, help="CPU timed runs (>= 20 recommended)")
    ap.add_argument("--gpu-runs", type=int, default=10, help="GPU timed runs")
    ap.add_argument("--json", action="store_true", help="print JSON lines only")
    a = ap.parse_args()

    pcm, name = load_signal(a.seconds)
    common = dict(bench="features", impl="torch", torch=torch.__version__,
                  torchaudio=getattr(ref.torchaudio, "__version__", None), signal=name,
                  seconds=a.seconds, melbank=ref.MELBANK_IMPL)
    if torch.cuda.is_available():
        common["gpu"] = torch.cuda.get_device_name(0)
    rep = Report(a.json, common)
    if not a.json:
        print(f"# torch {common['torch']}, torchaudio {common['torchaudio']}, signal {name}, "
              f"{a.seconds} s; RTFx = audio seconds per compute second", flush=True)

    if not a.gpu_only:
        cpu_benchmarks(rep, pcm, a.seconds, a.runs)
    if not a.cpu_only:
        if torch.cuda.is_available():
            gpu_benchmarks(rep, pcm, a.seconds, a.batch, a.gpu_runs)
        else:
            print("skip gpu: torch.cuda.is_available() is false", file=sys.stderr)


if __name__ == "__main__":
    main()
