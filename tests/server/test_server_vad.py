#!/usr/bin/env python3
"""hark serve with a Silero VAD model (run by tests/server/test_server_vad.c): KServe v2 with WAV
+ WAV_LENS (a padded batch) or AUDIO (encoded files) in, SEGMENTS (INT32 [batch, segments, 2]:
start and end ms, shorter rows padded with -1) out, equal to `hark vad`'s segments for the same
files; request parameters (threshold); bad input; OpenAI transcriptions refused for a VAD model.
Usage: test_server_vad.py HARK_BIN VAD_MODEL_DIR WAV... Exit 0 = pass."""
import json, os, shutil, subprocess, sys, tempfile, wave
import numpy as np
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server, name_models  # noqa: E402

hark, model_dir, wavs = sys.argv[1], sys.argv[2], sys.argv[3:]
tmp = tempfile.mkdtemp(prefix="hark-serve-vad-")
repo = os.path.join(tmp, "repo")
shutil.copytree(model_dir, os.path.join(repo, "vad"))
check = Checks()


def reference(extra=()):
    """hark vad's segments (ms) per file"""
    p = subprocess.run([hark, "vad", "--model", os.path.join(repo, "vad"), "--format", "json",
                        *extra, *wavs], stdout=subprocess.PIPE, check=True, text=True)
    return [[[int(s["start"] * 1000 + 0.5), int(s["end"] * 1000 + 0.5)] for s in f["segments"]]
            for f in json.loads(p.stdout)]


def pcm(path):
    w = wave.open(path)
    assert w.getframerate() == 16000 and w.getnchannels() == 1
    return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0


def rows(out):
    a = np.array(out["data"], dtype=np.int64).reshape(out["shape"])
    return [[list(map(int, r)) for r in item if r[0] >= 0] for item in a]


def close(got, want):
    return len(got) == len(want) and all(
        len(g) == len(w) and all(abs(a - b) <= 1 for x, y in zip(g, w) for a, b in zip(x, y))
        for g, w in zip(got, want))


name_models(repo)
srv = Server(hark, repo)
base = srv.base
try:
    srv.wait_ready()
    want = reference()
    check(sum(len(w) for w in want) >= len(wavs), "hark vad finds speech in every file (%s)" % want)
    xs = [pcm(p) for p in wavs]
    N = max(len(x) for x in xs)
    flat = np.zeros((len(xs), N), dtype=np.float32)
    for i, x in enumerate(xs):
        flat[i, :len(x)] = x
    body = {"inputs": [{"name": "WAV", "shape": [len(xs), N], "datatype": "FP32",
                        "data": flat.ravel().tolist()},
                       {"name": "WAV_LENS", "shape": [len(xs), 1], "datatype": "INT32",
                        "data": [len(x) for x in xs]}]}
    r = requests.post(base + "/v2/models/vad/infer", data=json.dumps(body))
    out = r.json()["outputs"][0] if r.status_code == 200 else {}
    check(r.status_code == 200 and out.get("name") == "SEGMENTS" and out.get("datatype") == "INT32"
          and out["shape"][0] == len(xs) and out["shape"][2] == 2 and close(rows(out), want),
          "WAV batch of %d: SEGMENTS = hark vad's (%s)" % (len(xs), r.text[:200]))
    # encoded files, and a request parameter
    blobs = [open(p, "rb").read() for p in wavs]
    packed = b"".join(len(b).to_bytes(4, "little") + b for b in blobs)
    hdr = json.dumps({"inputs": [{"name": "AUDIO", "shape": [len(blobs)], "datatype": "BYTES",
                                  "parameters": {"binary_data_size": len(packed)}}],
                      "parameters": {"threshold": 0.8}}).encode()
    r = requests.post(base + "/v2/models/vad/infer", data=hdr + packed,
                      headers={"Inference-Header-Content-Length": str(len(hdr))})
    want8 = reference(["--threshold", "0.8"])
    check(r.status_code == 200 and close(rows(r.json()["outputs"][0]), want8),
          "AUDIO with threshold 0.8: = hark vad --threshold 0.8 (%s)" % r.text[:200])
    # silence: no segments, a [1, 0, 2] tensor
    body = {"inputs": [{"name": "WAV", "shape": [1, 16000], "datatype": "FP32",
                        "data": [0.0] * 16000}]}
    r = requests.post(base + "/v2/models/vad/infer", data=json.dumps(body))
    check(r.status_code == 200 and r.json()["outputs"][0]["shape"] == [1, 0, 2],
          "1 s of silence: no segments (%s)" % r.text[:120])
    # bad input
    r = requests.post(base + "/v2/models/vad/infer", data=json.dumps(
        {"inputs": [{"name": "WAV", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}],
         "parameters": {"threshold": 2}}))
    check(r.status_code == 400 and "threshold" in r.json()["error"], "threshold 2: 400")
    r = requests.post(base + "/v2/models/vad/infer", data=json.dumps(
        {"inputs": [{"name": "WAV", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}],
         "outputs": [{"name": "TRANSCRIPTS"}]}))
    check(r.status_code == 400 and "SEGMENTS" in r.json()["error"], "asking for TRANSCRIPTS: 400")
    r = requests.post(base + "/v1/audio/transcriptions", data={"model": "vad"},
                      files={"file": ("a.wav", blobs[0], "audio/wav")})
    check(r.status_code == 400 and "not a recognizer" in r.json()["error"]["message"],
          "OpenAI transcription with a VAD model: 400")
    check(requests.get(base + "/v2/health/ready").status_code == 200, "still ready")
except Exception as e:  # noqa: BLE001
    import traceback
    traceback.print_exc()
    check(False, "exception: %r" % e)
finally:
    rc = srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)
check(rc == 0, "exit 0 on SIGTERM (%s)" % rc)
check.exit()
