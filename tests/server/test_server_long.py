#!/usr/bin/env python3
"""Long-form transcription through hark serve (issue #21 §2; run by tests/server/test_server_long.c):
a repository with the bundled demo recognizer naming the Silero VAD as its vad_model, the same
recognizer without one (fixed windows), and the VAD. A file over a minute (the demo clips, at
16 kHz, tiled with silences) through OpenAI's transcriptions (json, text, verbose_json, srt,
vtt) and KServe AUDIO gives exactly `hark transcribe --vad`'s text and segments for that file;
each clip's text alone concatenated gives the same; windows without a VAD still give the clips'
words in order; over --max-audio-seconds is 413.
Usage: test_server_long.py HARK_BIN VAD_MODEL_DIR. Exit 0 = pass."""
import json, os, re, shutil, struct, subprocess, sys, tempfile, wave
import numpy as np
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server, texts_of, name_models  # noqa: E402

hark, vad_dir = sys.argv[1], sys.argv[2]
EX = "examples/demo-en"
tmp = tempfile.mkdtemp(prefix="hark-serve-long-")
repo = os.path.join(tmp, "repo")
check = Checks()
DECODE = ["--decoding-method", "attention_rescoring", "--beam-size", "10", "--ctc-weight", "0.5",
          "--reverse-weight", "0.3"]


def entry(name, vad):
    d = os.path.join(repo, name)
    shutil.copytree("models/demo-en-asr", d)
    cfg = open(os.path.join(d, "config.pbtxt")).read()
    cfg = cfg.replace('name: "demo-en-asr"', 'name: "%s"' % name).replace("KIND_GPU", "KIND_CPU")
    if vad:
        cfg += 'parameters { key: "vad_model" value { string_value: "vad" } }\n'
    open(os.path.join(d, "config.pbtxt"), "w").write(cfg)


def clip16k(path):
    """a clip as 16 kHz int16 (linear interpolation where the rate differs)"""
    w = wave.open(path)
    x = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64)
    if w.getframerate() != 16000:
        n = int(round(len(x) * 16000 / w.getframerate()))
        x = np.interp(np.arange(n) * w.getframerate() / 16000, np.arange(len(x)), x)
    return np.round(x).astype(np.int16)


def write_wav(path, x):
    w = wave.open(path, "wb")
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(16000)
    w.writeframes(x.astype("<i2").tobytes())
    w.close()


def cer(hyp, ref):
    """character error rate of hyp against ref (Levenshtein)"""
    d = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(hyp) + 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (ref[i - 1] != hyp[j - 1]))
    return d[len(hyp)] / max(1, len(ref))


def post(model, path, fmt, extra=None):
    with open(path, "rb") as f:
        data = {"model": model, "response_format": fmt}
        data.update(extra or {})
        return requests.post(base + "/v1/audio/transcriptions",
                             files={"file": (os.path.basename(path), f, "audio/wav")}, data=data)


os.makedirs(repo)
shutil.copytree(vad_dir, os.path.join(repo, "vad"))
entry("asr", True)
entry("asr-windows", False)
keys = sorted(l.split(" ", 1)[0] for l in open(os.path.join(EX, "trans.txt")))
clips = {k: clip16k(os.path.join(EX, k + ".wav")) for k in keys}
for k in keys:
    write_wav(os.path.join(tmp, k + ".wav"), clips[k])
# the long file: 6 rounds of the clips, 1.5 s of silence around each (> 60 s)
gap = np.zeros(24000, np.int16)
order = [keys[(r + i) % len(keys)] for r in range(6) for i in range(len(keys))]
long_wav = os.path.join(tmp, "long.wav")
parts = [gap]
for k in order:
    parts += [clips[k], gap]
long_x = np.concatenate(parts)
write_wav(long_wav, long_x)
dur = len(long_x) / 16000.0

# the reference: hark transcribe --vad on the same file
p = subprocess.run([hark, "transcribe", "--model", os.path.join(repo, "asr"), *DECODE, "--vad",
                    os.path.join(repo, "vad"), "--format", "json", long_wav],
                   stdout=subprocess.PIPE, text=True)
check(p.returncode == 0, "hark transcribe --vad runs")
ref = json.loads(p.stdout)[0] if p.returncode == 0 else {"text": "", "segments": []}

name_models(repo)
srv = Server(hark, repo, args=["--cpu-threads", "1"])
base = srv.base
try:
    srv.wait_ready(120)
    check(dur > 60, "the long file is %.1f s" % dur)
    alone = {}
    for k in keys:
        r = post("asr", os.path.join(tmp, k + ".wav"), "json")
        alone[k] = r.json().get("text", "") if r.status_code == 200 else "?"
    want_clips = " ".join(alone[k] for k in order)
    r = post("asr", long_wav, "json")
    got = r.json().get("text") if r.status_code == 200 else r.text
    check(r.status_code == 200 and got == ref["text"],
          "json text = hark transcribe --vad's (%r... vs %r...)" % (got[:80], ref["text"][:80]))
    # the VAD trims some clips' quiet last sounds, so the clips alone only match word for word
    e = cer(got, want_clips)
    check(e < 0.1, "json text is the clips' texts in order (CER %.3f)" % e)
    r = post("asr", long_wav, "text")
    check(r.status_code == 200 and r.text == ref["text"], "text format")
    r = post("asr", long_wav, "verbose_json", {"timestamp_granularities[]": "word"})
    v = r.json() if r.status_code == 200 else {}
    segs = v.get("segments", [])
    check(v.get("text") == ref["text"] and abs(v.get("duration", 0) - dur) < 0.01,
          "verbose_json text and duration (%s)" % v.get("duration"))
    rs = [s for s in ref["segments"] if s["text"]]
    check(len(segs) == len(rs) == len(order), "a segment per clip (%d, cli %d, clips %d)" %
          (len(segs), len(rs), len(order)))
    check(all(s["id"] == i and set(s) >= {"id", "seek", "start", "end", "text", "tokens",
                                          "temperature", "avg_logprob", "compression_ratio",
                                          "no_speech_prob"} for i, s in enumerate(segs)),
          "segments are shaped as OpenAI's")
    check(all(abs(s["start"] - q["start"]) < 1e-3 and abs(s["end"] - q["end"]) < 1e-3 and
              s["text"] == q["text"] for s, q in zip(segs, rs)),
          "segments = hark transcribe --vad's (start, end, text)")
    check(all(0 <= a["start"] < a["end"] <= b["start"] for a, b in zip(segs, segs[1:])) and
          segs and segs[-1]["end"] <= dur, "segments in order, inside the audio")
    # each clip's segment lies about where the clip is
    t, spans = 1.5, []
    for k in order:
        spans.append((t, t + len(clips[k]) / 16000.0))
        t += len(clips[k]) / 16000.0 + 1.5
    check(all(abs(s["start"] - a) < 0.5 and abs(s["end"] - b) < 0.5
              for s, (a, b) in zip(segs, spans)), "segment times are the clips' (within 0.5 s)")
    words = v.get("words", [])
    check(len(words) == len(ref["text"].split()) and
          all(a["start"] <= b["start"] for a, b in zip(words, words[1:])) and
          words[-1]["end"] <= dur + 0.01, "words with times in order (%d)" % len(words))
    r = post("asr", long_wav, "srt")
    cues = re.findall(r"(\d+)\n(\d\d:\d\d:\d\d,\d\d\d) --> (\d\d:\d\d:\d\d,\d\d\d)\n", r.text)
    check(r.status_code == 200 and len(cues) >= len(order) // 2 and cues[0][0] == "1" and
          cues[-1][2] > "00:01:00,000", "srt cues over the whole file (%d)" % len(cues))
    r = post("asr", long_wav, "vtt")
    check(r.status_code == 200 and r.text.startswith("WEBVTT") and
          "00:01:" in r.text, "vtt over the whole file")
    # KServe AUDIO: TRANSCRIPTS is the stitched text
    blob = open(long_wav, "rb").read()
    blob = struct.pack("<I", len(blob)) + blob
    hb = json.dumps({"inputs": [{"name": "AUDIO", "shape": [1], "datatype": "BYTES",
                                 "parameters": {"binary_data_size": len(blob)}}],
                     "outputs": [{"name": "TRANSCRIPTS",
                                  "parameters": {"binary_data": True}}]}).encode()
    r = requests.post(base + "/v2/models/asr/infer", data=hb + blob,
                      headers={"Inference-Header-Content-Length": str(len(hb)),
                               "Content-Type": "application/octet-stream"})
    hl = int(r.headers.get("Inference-Header-Content-Length", 0))
    check(r.status_code == 200 and texts_of(r.content[hl:]) == [ref["text"]],
          "KServe AUDIO: TRANSCRIPTS is the stitched text (%d %s)" % (r.status_code,
                                                                     r.content[:100]))
    # no vad_model: 30 s windows overlapping by 2 s, stitched by the words' times. The file ends
    # 0.3 s after its last clip, so that every window's kept part holds speech: with no VAD, what
    # the recogniser makes of a window of nothing but digital silence is the model's habit, not
    # hark's (runs 1-3 of the demo recogniser said "the", or "e e", in the long file's closing
    # 1.5 s; run 4, trained on undithered features too, says nothing in digital silence)
    win_wav = os.path.join(tmp, "long-windows.wav")
    x = long_x[:int(round((spans[-1][1] + 0.3) * 16000))]
    write_wav(win_wav, x)
    win_dur = len(x) / 16000.0
    r = post("asr-windows", win_wav, "verbose_json")
    v = r.json() if r.status_code == 200 else {}
    segs = v.get("segments", [])
    wt = v.get("text", "").split()
    e = cer(" ".join(wt), want_clips)
    check(r.status_code == 200 and e < 0.4, "windows: the clips' texts in order (CER %.3f)" % e)
    # window k holds [28k, 28k + 30]; stitched, it keeps [28k + 1, 28k + 29] (from 0 in the
    # first, to the end in the last): a segment for each window, each holding more than half a
    # second of a clip
    n_win = int(np.ceil((win_dur - 2) / 28))
    kept = [(0 if k == 0 else 28 * k + 1, win_dur if k == n_win - 1 else 28 * k + 29)
            for k in range(n_win)]
    spoken = [p for p in kept if any(min(b, p[1]) - max(a, p[0]) > 0.5 for a, b in spans)]
    check(len(segs) == len(spoken) == n_win and segs and segs[0]["start"] == 0 and
          all(abs(a["end"] - b["start"]) < 1e-6 for a, b in zip(segs, segs[1:])),
          "windows: one segment per window that holds speech (%d of %d), meeting halfway in "
          "each overlap (%s)" % (len(spoken), n_win, [(s["start"], s["end"]) for s in segs]))
finally:
    srv.stop()
# over --max-audio-seconds: 413 (VAD or not)
srv = Server(hark, repo, args=["--cpu-threads", "1", "--max-audio-seconds", "50"])
base = srv.base
try:
    srv.wait_ready(120)
    for m in ("asr", "asr-windows"):
        r = post(m, long_wav, "json")
        check(r.status_code == 413 and "max-audio-seconds" in r.text,
              "%s: over --max-audio-seconds: 413 (%d %s)" % (m, r.status_code, r.text[:120]))
finally:
    srv.stop()
shutil.rmtree(tmp, ignore_errors=True)
check.exit()
