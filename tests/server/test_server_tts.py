"""Integration test of `hark serve` with a TTS model (run by tests/server/test_server_tts.c): a
real server on loopback with DLE's converted FastSpeech golden model and the real HiFi-GAN V3,
driven the way the seed's Triton client (KServe v2: INPUT text -> OUTPUT samples + OUTPUT_LENGTH)
and OpenAI's client (POST /v1/audio/speech, streamed) drive it, plus bad input and a client that
leaves mid-stream. The samples are compared with `hark speak`'s. Usage: test_server_tts.py
HARK_BIN FASTSPEECH_DIR VOCODER_DIR. Exit 0 = pass."""
import base64, json, os, re, shutil, struct, subprocess, sys, tempfile, threading, wave
import numpy as np
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server  # noqa: E402

hark, fs_dir, voc_dir = sys.argv[1:4]
t2_dir, wg_dir = (sys.argv[4:6] + [None, None])[:2]  # Tacotron 2 + WaveGlow (optional)
S1 = "Dr. Smith paid $12.50 for 3 books on Jan. 2nd, 1999 \u2014 at 4:30 p.m.!"
S2 = "Printing, in the only sense with which we are at present concerned."

tmp = tempfile.mkdtemp(prefix="hark-serve-tts-")
repo = os.path.join(tmp, "repo")
os.makedirs(os.path.join(repo, "fastspeech"))
shutil.copytree(os.path.join(fs_dir, "1"), os.path.join(repo, "fastspeech", "1"))
cfg = open(os.path.join(fs_dir, "config.pbtxt")).read()
cfg = re.sub(r'name: "[^"]*"', 'name: "fastspeech"', cfg, count=1)
cfg += 'parameters { key: "vocoder" value { string_value: "%s" } }\n' % os.path.abspath(voc_dir)
open(os.path.join(repo, "fastspeech", "config.pbtxt"), "w").write(cfg)

# the reference: hark speak (the same engines through the C API), 16-bit WAV
ref = {}
for i, s in enumerate([S1, S2]):
    out = os.path.join(tmp, "ref%d.wav" % i)
    subprocess.run([hark, "speak", "--model", os.path.join(repo, "fastspeech"), s, "-o", out],
                   check=True, stdout=subprocess.DEVNULL)
    w = wave.open(out)
    ref[s] = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64) / 32768.0
    rate = w.getframerate()

srv = Server(hark, repo, args=["--http-threads", "2",  # (loads through the API below)
                               "--model-control-mode", "explicit", "--load-model", "*"])
base, log = srv.base, srv.log
check = Checks()


def close(a, b, tol):
    return len(a) == len(b) and (len(a) == 0 or float(np.max(np.abs(a - b))) <= tol)


def speech(body, **kw):
    return requests.post(base + "/v1/audio/speech", data=json.dumps(body), **kw)


try:
    import time
    t0 = time.time()
    while requests.get(base + "/v2/health/ready").status_code != 200:
        assert time.time() - t0 < 120, "not ready within 120 s: " + "".join(log)
        time.sleep(0.2)
    meta = requests.get(base + "/v2/models/fastspeech").json()
    check([i["name"] for i in meta["inputs"]] == ["INPUT"] and
          [o["name"] for o in meta["outputs"]] == ["OUTPUT", "OUTPUT_LENGTH"],
          "metadata: the seed's INPUT -> OUTPUT, OUTPUT_LENGTH")

    # KServe v2, JSON, a batch of two texts as the seed's client sends them
    body = {"inputs": [{"name": "INPUT", "shape": [2, 1], "datatype": "BYTES", "data": [S1, S2]}]}
    r = requests.post(base + "/v2/models/fastspeech/infer", data=json.dumps(body))
    check(r.status_code == 200, "KServe JSON batch of 2: %d %s" % (r.status_code, r.text[:200]))
    outs = {o["name"]: o for o in r.json()["outputs"]} if r.status_code == 200 else {}
    if outs:
        L = outs["OUTPUT_LENGTH"]["data"]
        a = np.array(outs["OUTPUT"]["data"], dtype=np.float64).reshape(outs["OUTPUT"]["shape"])
        check(outs["OUTPUT_LENGTH"]["shape"] == [2, 1] and L == [len(ref[S1]), len(ref[S2])],
              "OUTPUT_LENGTH [2, 1] = hark speak's lengths (%s)" % L)
        check(outs["OUTPUT"]["shape"] == [2, max(L)], "OUTPUT [2, longest]")
        check(close(a[0, :L[0]], ref[S1], 1.5 / 32768) and close(a[1, :L[1]], ref[S2], 1.5 / 32768),
              "OUTPUT equals hark speak's samples (16-bit)")
        check(not np.any(a[1, L[1]:]), "the shorter row is zero-padded")

    # binary output, one text, a request parameter (speed)
    hdr = json.dumps({"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "BYTES",
                                  "data": [S2]}],
                      "outputs": [{"name": "OUTPUT", "parameters": {"binary_data": True}},
                                  {"name": "OUTPUT_LENGTH"}],
                      "parameters": {"speed": 2.0}}).encode()
    r = requests.post(base + "/v2/models/fastspeech/infer", data=hdr)
    if r.status_code == 200:
        n = int(r.headers["Inference-Header-Content-Length"])
        j = json.loads(r.content[:n])
        o = {x["name"]: x for x in j["outputs"]}
        blob = np.frombuffer(r.content[n:], "<f4")
        check(o["OUTPUT_LENGTH"]["data"][0] == len(blob) and 0 < len(blob) < 0.7 * len(ref[S2]),
              "binary OUTPUT; speed 2 halves the duration (%d vs %d)" % (len(blob), len(ref[S2])))
    else:
        check(False, "binary output request: %d %s" % (r.status_code, r.text))

    # concurrent requests through the dynamic batcher: every answer right
    res = [None] * 6

    def one(i):
        b = {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "BYTES",
                         "data": [S2 if i % 2 else S1]}]}
        res[i] = requests.post(base + "/v2/models/fastspeech/infer", data=json.dumps(b))
    th = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    [t.start() for t in th]
    [t.join() for t in th]
    ok = all(x.status_code == 200 and x.json()["outputs"][1]["data"][0] ==
             len(ref[S2 if i % 2 else S1]) for i, x in enumerate(res))
    check(ok, "6 concurrent KServe requests")

    # OpenAI speech: WAV streamed in chunks, samples = hark speak's
    r = speech({"model": "tts-1", "input": S1, "voice": "alloy", "response_format": "wav"},
               stream=True)
    chunks = [c for c in r.raw.read_chunked()] if r.status_code == 200 else []
    data = b"".join(chunks)
    check(r.status_code == 200 and r.headers.get("Content-Type") == "audio/wav" and
          r.headers.get("Transfer-Encoding") == "chunked", "speech wav: 200, chunked audio/wav")
    # one HTTP chunk per piece of audio the vocoder emits: the header, a first piece of 32 mel
    # frames (8192 samples), then 64 frames each
    check(len(chunks) >= 4 and len(chunks[1]) == 2 * 32 * 256 and len(chunks[2]) == 2 * 64 * 256,
          "the audio came in %d chunks of %s bytes (streamed as the vocoder ran)" %
          (len(chunks), [len(c) for c in chunks[:4]]))
    check(data[:4] == b"RIFF" and data[36:40] == b"data" and
          struct.unpack("<I", data[24:28])[0] == rate, "a WAV header at %d Hz" % rate)
    pcm = np.frombuffer(data[44:], "<i2").astype(np.float64) / 32768.0
    check(close(pcm, ref[S1], 1.5 / 32768), "speech wav samples = hark speak's")

    # pcm: 24 kHz 16-bit, as OpenAI's
    r = speech({"model": "fastspeech", "input": S2, "voice": "default", "response_format": "pcm"})
    n24 = len(r.content) // 2
    check(r.status_code == 200 and abs(n24 - len(ref[S2]) * 24000 / rate) <= 2,
          "speech pcm at 24 kHz (%d samples)" % n24)

    # whole-file formats
    for fmt, magic in (("flac", b"fLaC"), ("mp3", None), ("opus", b"OggS")):
        r = speech({"input": S2, "voice": "nova", "response_format": fmt})
        if fmt == "mp3":
            good = r.content[:3] == b"ID3" or (len(r.content) > 1 and r.content[0] == 0xFF and
                                                r.content[1] & 0xE0 == 0xE0)
        else:
            good = r.content[:4] == magic
        check(r.status_code == 200 and good and
              int(r.headers.get("Content-Length", "0")) == len(r.content) > 1000,
              "speech %s: %d bytes, %s" % (fmt, len(r.content), r.headers.get("Content-Type")))
    r = speech({"input": S2})
    check(r.status_code == 200 and r.headers.get("Content-Type") == "audio/mpeg",
          "speech: OpenAI's default format is mp3")

    # stream_format sse: base64 deltas that join into the same WAV bytes, then done
    r = speech({"input": S1, "voice": "alloy", "response_format": "wav", "stream_format": "sse"})
    evs = [json.loads(l[6:]) for l in r.text.split("\n") if l.startswith("data: ")]
    joined = b"".join(base64.b64decode(e["audio"]) for e in evs
                      if e.get("type") == "speech.audio.delta")
    check(r.status_code == 200 and r.headers.get("Content-Type") == "text/event-stream" and
          len(evs) >= 3 and evs[-1].get("type") == "speech.audio.done" and joined == data,
          "speech sse: %d events, deltas = the WAV stream" % len(evs))

    # bad input: clear 4xx, the server keeps serving
    bad = [({"input": S2, "voice": "alice"}, "voice"),
           ({"input": S2, "response_format": "aac"}, "response_format"),
           ({"input": S2, "speed": 9}, "speed"),
           ({"input": ""}, "input"),
           ({"voice": "alloy"}, "input"),
           ({"input": S2, "stream_format": "ws"}, "stream_format"),
           ({"input": "x" * 5000}, "4096"),
           ({"input": "  ...  "}, "speakable")]
    for b, word in bad:
        r = speech(b)
        e = r.json().get("error", {}) if r.status_code == 400 else {}
        check(r.status_code == 400 and word in e.get("message", "") and
              e.get("type") == "invalid_request_error" and "code" in e and "param" in e,
              "speech %s -> 400 naming %s (%d %s)" % (json.dumps(b)[:40], word, r.status_code,
                                                      r.text[:120]))
    r = requests.post(base + "/v1/audio/speech", data=b"not json")
    check(r.status_code == 400, "speech: a body that is not JSON -> 400")
    check(requests.get(base + "/v1/audio/speech").status_code == 405, "speech: GET -> 405")
    r = requests.post(base + "/v2/models/fastspeech/infer", data=json.dumps(
        {"inputs": [{"name": "WAV", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}]}))
    check(r.status_code == 400 and "INPUT" in r.json()["error"], "KServe: audio to a TTS model")
    r = requests.post(base + "/v2/models/fastspeech/infer", data=json.dumps(
        {"inputs": [{"name": "INPUT", "shape": [1], "datatype": "BYTES", "data": [S2]}],
         "outputs": [{"name": "TRANSCRIPTS"}]}))
    check(r.status_code == 400 and "OUTPUT" in r.json()["error"], "KServe: unknown output")
    r = requests.post(base + "/v2/models/fastspeech/infer", data=json.dumps(
        {"inputs": [{"name": "INPUT", "shape": [9, 1], "datatype": "BYTES", "data": [S2] * 9}]}))
    check(r.status_code == 400 and "batch size" in r.json()["error"], "KServe: batch over max")
    files = {"file": ("a.wav", open(os.path.join(tmp, "ref0.wav"), "rb"))}
    r = requests.post(base + "/v1/audio/transcriptions", files=files,
                      data={"model": "fastspeech"})
    check(r.status_code == 400 and "not a recognizer" in r.json()["error"]["message"],
          "transcriptions with a TTS model -> 400")

    # a client that leaves mid-stream: the server goes on serving
    r = speech({"input": S1 + " " + S1, "response_format": "wav"}, stream=True)
    next(r.raw.read_chunked())
    r.close()
    r = speech({"input": S2, "response_format": "pcm"})
    check(r.status_code == 200 and abs(len(r.content) // 2 - n24) <= 0,
          "after a client left mid-stream, the next request is served")
    st = requests.get(base + "/v2/models/fastspeech/stats").json()["model_stats"][0]
    check(st["inference_count"] >= 15, "statistics count the syntheses (%d)" % st["inference_count"])

    if t2_dir:  # the seed's own model: Tacotron 2 + WaveGlow, loaded into the running server
        d = os.path.join(repo, "tacotron2waveglow")
        os.makedirs(d)
        shutil.copytree(os.path.join(t2_dir, "1"), os.path.join(d, "1"))
        c2 = re.sub(r'name: "[^"]*"', 'name: "tacotron2waveglow"',
                    open(os.path.join(t2_dir, "config.pbtxt")).read(), count=1)
        c2 += 'parameters { key: "vocoder" value { string_value: "%s" } }\n' % os.path.abspath(wg_dir)
        c2 += 'parameters { key: "use_denoiser" value { string_value: "no" } }\n'  # as DLE's
        open(os.path.join(d, "config.pbtxt"), "w").write(c2)
        r = requests.post(base + "/v2/repository/models/tacotron2waveglow/load")
        check(r.status_code == 200, "Tacotron 2 + WaveGlow loaded at run time (%s)" % r.text[:200])
        T2 = "Printing, in the only sense."
        out = os.path.join(tmp, "t2.wav")
        subprocess.run([hark, "speak", "--model", d, T2, "-o", out, "--denoiser-strength", "0"],
                       check=True, stdout=subprocess.DEVNULL)  # use_denoiser "no" is strength 0
        w = wave.open(out)
        t2ref = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64) / 32768.0
        body = {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "BYTES", "data": [T2]}],
                "parameters": {"use_denoiser": "no"}}
        r = requests.post(base + "/v2/models/tacotron2waveglow/infer", data=json.dumps(body))
        ok = r.status_code == 200
        if ok:
            o = {x["name"]: x for x in r.json()["outputs"]}
            a = np.array(o["OUTPUT"]["data"], dtype=np.float64)
            n2 = o["OUTPUT_LENGTH"]["data"][0]
            # hark speak peak-normalises as DLE's inference.py does: compare shapes
            ok = n2 == len(t2ref) and n2 > 0 and np.max(np.abs(
                a[:n2] / np.max(np.abs(a[:n2])) - t2ref / np.max(np.abs(t2ref)))) < 4.0 / 32768
        check(ok, "KServe tacotron2waveglow: OUTPUT = hark speak's audio (%s)" % r.text[:160])
        r = speech({"model": "tacotron2waveglow", "input": T2, "response_format": "wav"})
        check(r.status_code == 200 and r.content[:4] == b"RIFF" and
              (len(r.content) - 44) // 2 == len(t2ref), "speech with Tacotron 2 + WaveGlow")
        r = speech({"input": T2})  # two TTS models: "tts-1" stands for neither
        check(r.status_code == 404 and "single TTS model" in r.json()["error"]["message"] and
              r.json()["error"]["code"] == "model_not_found",
              "two TTS models: an unknown model name is a 404 (%s)" % r.text[:120])
finally:
    rc = srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)

check(rc == 0, "exit 0 on SIGTERM (%s)" % rc)
check.exit()
