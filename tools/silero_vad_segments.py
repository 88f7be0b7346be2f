#!/usr/bin/env python3
"""Reference speech segments for hark's Silero VAD: silero-vad's get_speech_timestamps rules
applied to the per-window probabilities that tools/silero_vad_reference.js wrote (ONNX Runtime
on the original model).

    silero_vad_segments.py --probs probs_16000.json --output segments_16000.json \
        [--threshold 0.5] [--neg-threshold X] [--min-speech-duration-ms 250] \
        [--max-speech-duration-s S] [--min-silence-duration-ms 100] [--speech-pad-ms 30] \
        [--silero-utils utils_vad.py]

By default a plain re-statement of the rules of silero-vad's utils_vad.py (segments in samples,
before its optional rounding to seconds). With --silero-utils PATH (silero-vad's own
src/silero_vad/utils_vad.py, e.g. from a checkout) it runs silero-vad's own function instead,
with a stand-in model that replays the probabilities (needs python3-torch; torchaudio and
packaging are stubbed when absent: only its audio I/O uses them): the two must agree. Output:
{"rate", "options", "files": [{"file", "n_samples", "segments": [[start, end], ...]}]}, samples.
Read by tests/model/silero/test_silero_vad.c; tools/silero_vad_reference.sh runs it.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)


def speech_timestamps(probs, n_samples, sr, window, threshold=0.5, neg_threshold=None,
                      min_speech_duration_ms=250, max_speech_duration_s=float("inf"),
                      min_silence_duration_ms=100, speech_pad_ms=30,
                      min_silence_at_max_speech=98, use_max_poss_sil_at_max_speech=True):
    min_speech = sr * min_speech_duration_ms / 1000
    pad = sr * speech_pad_ms / 1000
    max_speech = sr * max_speech_duration_s - window - 2 * pad
    min_silence = sr * min_silence_duration_ms / 1000
    min_sil_at_max = sr * min_silence_at_max_speech / 1000
    if neg_threshold is None:
        neg_threshold = max(threshold - 0.15, 0.01)
    triggered = False
    out, cur = [], None  # cur: [start] of the open segment
    temp_end = prev_end = next_start = 0
    sils = []  # (end of speech, silence length) inside the open segment
    for i, p in enumerate(probs):
        s = window * i
        if p >= threshold and temp_end:
            if s - temp_end > min_sil_at_max:
                sils.append((temp_end, s - temp_end))
            temp_end = 0
            if next_start < prev_end:
                next_start = s
        if p >= threshold and not triggered:
            triggered, cur = True, s
            continue
        if triggered and s - cur > max_speech:
            if use_max_poss_sil_at_max_speech and sils:
                prev_end, dur = max(sils, key=lambda x: x[1])
                out.append([cur, prev_end])
                cur = None
                next_start = prev_end + dur
                if next_start < prev_end + s:
                    cur = next_start
                else:
                    triggered = False
                prev_end = next_start = temp_end = 0
                sils = []
            elif prev_end:
                out.append([cur, prev_end])
                cur = None
                if next_start < prev_end:
                    triggered = False
                else:
                    cur = next_start
                prev_end = next_start = temp_end = 0
                sils = []
            else:
                out.append([cur, s])
                cur = None
                prev_end = next_start = temp_end = 0
                triggered = False
                sils = []
                continue
        if p < neg_threshold and triggered:
            if not temp_end:
                temp_end = s
            if not use_max_poss_sil_at_max_speech and s - temp_end > min_sil_at_max:
                prev_end = temp_end
            if s - temp_end < min_silence:
                continue
            if temp_end - cur > min_speech:
                out.append([cur, temp_end])
            cur = None
            prev_end = next_start = temp_end = 0
            triggered = False
            sils = []
    if cur is not None and n_samples - cur > min_speech:
        out.append([cur, n_samples])
    for i, seg in enumerate(out):
        if i == 0:
            seg[0] = int(max(0, seg[0] - pad))
        if i != len(out) - 1:
            gap = out[i + 1][0] - seg[1]
            if gap < 2 * pad:
                seg[1] += int(gap // 2)
                out[i + 1][0] = int(max(0, out[i + 1][0] - gap // 2))
            else:
                seg[1] = int(min(n_samples, seg[1] + pad))
                out[i + 1][0] = int(max(0, out[i + 1][0] - pad))
        else:
            seg[1] = int(min(n_samples, seg[1] + pad))
    return out


def silero_own(utils_path, probs, n_samples, sr, window, **kw):
    """silero-vad's get_speech_timestamps itself, over a model that replays `probs`."""
    import types
    import torch
    # utils_vad.py imports these for its audio I/O helpers, which are not used here
    for name in ("torchaudio", "packaging"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = types.ModuleType(name)
    if not hasattr(sys.modules["packaging"], "version"):
        sys.modules["packaging"].version = types.ModuleType("packaging.version")
    ns = {"__name__": "silero_utils_vad"}
    with open(utils_path, encoding="utf-8") as f:
        exec(compile(f.read(), utils_path, "exec"), ns)

    class Replay:
        def reset_states(self):
            self.i = 0

        def __call__(self, chunk, sr_):
            assert chunk.shape[-1] == window and sr_ == sr
            p = probs[self.i]
            self.i += 1
            return torch.tensor([[p]], dtype=torch.float64)

    m = Replay()
    m.reset_states()
    ts = ns["get_speech_timestamps"](torch.zeros(n_samples), m, sampling_rate=sr, **kw)
    if m.i != len(probs):
        raise SystemExit(f"silero's function asked for {m.i} windows, the file has {len(probs)}")
    return [[int(t["start"]), int(t["end"])] for t in ts]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probs", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--neg-threshold", type=float, default=None)
    ap.add_argument("--min-speech-duration-ms", type=int, default=250)
    ap.add_argument("--max-speech-duration-s", type=float, default=float("inf"))
    ap.add_argument("--min-silence-duration-ms", type=int, default=100)
    ap.add_argument("--speech-pad-ms", type=int, default=30)
    ap.add_argument("--silero-utils", metavar="utils_vad.py")
    a = ap.parse_args(argv)
    with open(a.probs, encoding="utf-8") as f:
        ref = json.load(f)
    sr, window = ref["rate"], ref["window"]
    kw = {"threshold": a.threshold, "neg_threshold": a.neg_threshold,
          "min_speech_duration_ms": a.min_speech_duration_ms,
          "max_speech_duration_s": a.max_speech_duration_s,
          "min_silence_duration_ms": a.min_silence_duration_ms,
          "speech_pad_ms": a.speech_pad_ms}
    files = []
    for e in ref["files"]:
        if a.silero_utils:
            segs = silero_own(a.silero_utils, e["probs"], e["n_samples"], sr, window, **kw)
        else:
            segs = speech_timestamps(e["probs"], e["n_samples"], sr, window, **kw)
        files.append({"file": e["file"], "n_samples": e["n_samples"], "segments": segs})
    opts = dict(kw)
    if opts["max_speech_duration_s"] == float("inf"):
        opts["max_speech_duration_s"] = None
    out = {"rate": sr, "window": window, "source": "silero-vad utils_vad.py" if a.silero_utils
           else "tools/silero_vad_segments.py", "options": opts, "files": files}
    with open(a.output, "w", encoding="utf-8") as f:
        json.dump(out, f)
        f.write("\n")
    print(f"wrote {a.output}: {sum(len(x['segments']) for x in files)} segments in "
          f"{len(files)} files")


if __name__ == "__main__":
    sys.exit(main())
