"""Integration test of `hark serve` with an icefall transducer (run by
tests/server/test_server_icefall.c): a real server on loopback with icefall's converted T1 golden
model under two names — the converter's config (greedy_search) and one whose config.pbtxt picks
modified_beam_search — driven with KServe v2 binary tensors (WAV/WAV_LENS -> TRANSCRIPTS, the
sherpa/WeNet contract), request parameters, OpenAI transcriptions and bad input.
Usage: test_server_icefall.py HARK_BIN MODEL_DIR GOLDEN_T1_DIR. Exit 0 = pass."""
import json, os, re, shutil, struct, subprocess, sys, tempfile, threading, time
import numpy as np
import requests

hark, model_dir, golden = sys.argv[1:4]
RES = json.load(open(os.path.join(golden, "results.json")))
UTTS = RES["batch"]["order"]
WAV = [np.load(os.path.join(golden, "goldens", u, "waveform.npy")) for u in UTTS]
GREEDY = [RES["utterances"][u]["greedy_search"]["text"] for u in UTTS]
BEAM = [RES["utterances"][u]["modified_beam_search"]["text"] for u in UTTS]

tmp = tempfile.mkdtemp(prefix="hark-serve-icefall-")
repo = os.path.join(tmp, "repo")
os.makedirs(repo)
shutil.copytree(model_dir, os.path.join(repo, "transducer"))  # sherpa's model name
mbs = os.path.join(repo, "transducer_mbs")
shutil.copytree(model_dir, mbs)
cfg = open(os.path.join(mbs, "config.pbtxt")).read()
cfg = cfg.replace('name: "m"', 'name: "transducer_mbs"').replace(
    'string_value: "greedy_search"', 'string_value: "modified_beam_search"')
open(os.path.join(mbs, "config.pbtxt"), "w").write(cfg)
proc = subprocess.Popen([hark, "serve", "--model-repository", repo, "--http-port", "0",
                         "--metrics-port", "0", "--grpc-port", "-1", "--http-threads", "1"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
line = proc.stdout.readline()
m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
assert m, "no startup line: " + line
base = f"http://127.0.0.1:{m.group(1)}"
log = []
threading.Thread(target=lambda: [log.append(l) for l in proc.stdout], daemon=True).start()
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def infer(model, inputs, output, params=None):
    """KServe v2 binary request: inputs [(name, datatype, ndarray)] -> (status, json, blob)."""
    blobs, hin = [], []
    for name, dt, a in inputs:
        b = a.tobytes()
        blobs.append(b)
        hin.append({"name": name, "shape": list(a.shape), "datatype": dt,
                    "parameters": {"binary_data_size": len(b)}})
    h = {"inputs": hin, "outputs": [{"name": output, "parameters": {"binary_data": True}}]}
    if params:
        h["parameters"] = params
    hb = json.dumps(h).encode()
    r = requests.post(f"{base}/v2/models/{model}/infer", data=hb + b"".join(blobs),
                      headers={"Inference-Header-Content-Length": str(len(hb)),
                               "Content-Type": "application/octet-stream"})
    if r.status_code != 200:
        return r.status_code, r.json(), b""
    hl = int(r.headers["Inference-Header-Content-Length"])
    return 200, json.loads(r.content[:hl]), r.content[hl:]


def texts_of(blob):
    out, o = [], 0
    while o < len(blob):
        k = struct.unpack("<I", blob[o:o + 4])[0]
        out.append(blob[o + 4:o + 4 + k].decode())
        o += 4 + k
    return out


try:
    t0 = time.time()
    while requests.get(base + "/v2/health/ready").status_code != 200:
        assert time.time() - t0 < 60, "not ready within 60 s"
        time.sleep(0.1)
    N = max(len(w) for w in WAV)
    batch = np.zeros((4, N), dtype="<f4")
    for i, w in enumerate(WAV):
        batch[i, :len(w)] = w
    lens = np.array([[len(w)] for w in WAV], dtype="<i4")
    ins = [("WAV", "FP32", batch), ("WAV_LENS", "INT32", lens)]
    st, js, blob = infer("transducer", ins, "TRANSCRIPTS")
    got = texts_of(blob) if st == 200 else js
    check(st == 200 and got == GREEDY, f"WAV/WAV_LENS batch of 4: icefall's greedy texts ({got})")
    st, js, blob = infer("transducer", ins, "TRANSCRIPTS",
                         {"decoding_method": "modified_beam_search", "beam_size": 4})
    got = texts_of(blob) if st == 200 else js
    check(st == 200 and got == BEAM, f"request decoding_method modified_beam_search ({got})")
    st, js, blob = infer("transducer_mbs", ins, "TRANSCRIPTS")
    got = texts_of(blob) if st == 200 else js
    check(st == 200 and got == BEAM, f"config.pbtxt decoding_method modified_beam_search ({got})")
    st, js, blob = infer("transducer_mbs", ins, "TRANSCRIPTS", {"decoding_method": "greedy_search"})
    check(st == 200 and texts_of(blob) == GREEDY, "the request's method over the config's")
    # sherpa's Triton client sends WAV as FP16 (its configs declare TYPE_FP16): the same texts as
    # the FP16-rounded audio gives through FP32
    b16 = batch.astype("<f2")
    st, js, blob = infer("transducer", [("WAV", "FP16", b16), ("WAV_LENS", "INT32", lens)],
                         "TRANSCRIPTS")
    st2, js2, blob2 = infer("transducer", [("WAV", "FP32", b16.astype("<f4")),
                                           ("WAV_LENS", "INT32", lens)], "TRANSCRIPTS")
    check(st == 200 and st2 == 200 and texts_of(blob) == texts_of(blob2),
          "WAV as FP16 = the same samples as FP32 (%s)" % ("ok" if st == 200 else js))

    wav = os.path.join(golden, "wavs", UTTS[2] + ".wav")
    with open(wav, "rb") as fh:
        r = requests.post(base + "/v1/audio/transcriptions",
                          files={"file": (os.path.basename(wav), fh, "audio/wav")},
                          data={"model": "transducer", "response_format": "json"})
    check(r.status_code == 200 and r.json().get("text") == GREEDY[2],
          f"OpenAI transcription: {r.status_code} {r.text[:120]}")

    st, js, _ = infer("transducer", ins, "TRANSCRIPTS", {"decoding_method": "fast_beam_search"})
    check(st == 400 and "fast_beam_search" in js.get("error", ""), f"fast_beam_search: 400 ({js})")
    st, js, _ = infer("transducer", ins, "TRANSCRIPTS", {"beam_size": 0})
    check(st == 400 and "beam_size must be in [1, 64]" in js.get("error", ""),
          f"beam_size 0: 400 ({js})")
    st, js, _ = infer("transducer", [("WAV", "FP32", np.zeros((1, 500), dtype="<f4")),
                                     ("WAV_LENS", "INT32", np.array([[500]], dtype="<i4"))],
                      "TRANSCRIPTS")
    check(st == 400 and "too short" in js.get("error", ""), f"500 samples: 400 ({js})")
    bad = batch[1:2].copy()
    bad[0, 100] = np.nan
    st, js, _ = infer("transducer", [("WAV", "FP32", bad), ("WAV_LENS", "INT32", lens[1:2])],
                      "TRANSCRIPTS")
    check(st == 400 and "NaN" in js.get("error", ""), f"NaN audio: 400 ({js})")
    check(requests.get(base + "/v2/health/ready").status_code == 200, "still ready")
finally:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(tmp, ignore_errors=True)
if failures:
    print("".join(log[-40:]))
    sys.exit(1)
