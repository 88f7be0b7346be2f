#!/usr/bin/env python3
"""`hark serve` with no --model-repository (issue #22): it says it serves the bundled demo models,
both demo entries become ready, the OpenAI transcription endpoint gives each bundled example's
exact text with the offline entry, and a WeNet WebSocket stream of one example through the
streaming entry (what the live page uses) ends in a final result close to its text. When the demo
voice (models/demo-en-tts) is there: it is ready too, and a sentence it says through
/v1/audio/speech comes back as a 22,050 Hz WAV that /v1/audio/transcriptions hears as its words
(the server's own round trip; at most one word wrong).
Usage: test_demo_serve.py HARK_BIN. Run from the repository root. Exit 0 = pass."""
import json, os, sys, wave

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Server, WS  # noqa: E402

hark = sys.argv[1]
EX = "examples/demo-en"
refs = dict(l.rstrip("\n").split(" ", 1) for l in open(os.path.join(EX, "trans.txt")))
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def word_errors(ref, hyp):
    r, h = ref.split(), hyp.split()
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
    return d[len(h)]


srv = Server(hark, None)
try:
    check(any("bundled demo models" in l for l in srv.early),
          "the log says the bundled demo models are served (%r)" % "".join(srv.early)[:200])
    srv.wait_ready(120)
    for m in ("demo-en-asr", "demo-en-asr-stream"):
        check(requests.get(srv.base + "/v2/models/%s/ready" % m).status_code == 200, m + " ready")
    cfg = requests.get(srv.base + "/v2/models/demo-en-asr-stream/config").json()
    check("sequence_batching" in cfg, "demo-en-asr-stream serves sequences (the live page lists it)")
    for key, ref in sorted(refs.items()):
        with open(os.path.join(EX, key + ".wav"), "rb") as f:
            r = requests.post(srv.base + "/v1/audio/transcriptions",
                              files={"file": (key + ".wav", f, "audio/wav")},
                              data={"model": "demo-en-asr"})
        got = r.json().get("text") if r.status_code == 200 else r.text
        check(r.status_code == 200 and got == ref, "%s: %r" % (key, got))
    # the 16 kHz example (flite's) streamed as PCM, as the live page and WeNet's client send it
    key = next(k for k in sorted(refs)
               if wave.open(os.path.join(EX, k + ".wav")).getframerate() == 16000)
    w = wave.open(os.path.join(EX, key + ".wav"))
    pcm = w.readframes(w.getnframes())
    ws = WS(srv.port, "/?model=demo-en-asr-stream")
    check(ws.ok, "WebSocket handshake")
    ws.text({"signal": "start", "nbest": 1, "continuous_decoding": False})
    msgs, _ = ws.messages("server_ready")
    check(msgs and msgs[-1].get("type") == "server_ready", "server_ready")
    step = 2 * 5120
    for i in range(0, len(pcm), step):
        ws.send(2, pcm[i:i + step])
    ws.text({"signal": "end"})
    msgs, _ = ws.messages("speech_end")
    fin = [json.loads(x["nbest"])[0]["sentence"] for x in msgs if x.get("type") == "final_result"]
    ref = refs[key]
    errs = word_errors(ref, fin[0]) if fin else len(ref.split())
    check(bool(fin) and errs <= len(ref.split()) // 2,
          "streamed %s: final %r (%d word errors against %r)" % (key, fin[:1], errs, ref))
    if os.path.isfile("models/demo-en-tts/config.pbtxt"):
        check(requests.get(srv.base + "/v2/models/demo-en-tts/ready").status_code == 200,
              "demo-en-tts ready")
        said = "The prisoners were taken to the court in the morning."
        r = requests.post(srv.base + "/v1/audio/speech",
                          json={"model": "demo-en-tts", "input": said, "response_format": "wav"})
        ok = r.status_code == 200 and r.content[:4] == b"RIFF"
        check(ok, "speech: %d, %d bytes" % (r.status_code, len(r.content)))
        if ok:
            rate = int.from_bytes(r.content[24:28], "little")
            check(rate == 22050, "speech: %d Hz" % rate)
            t = requests.post(srv.base + "/v1/audio/transcriptions",
                              files={"file": ("said.wav", r.content, "audio/wav")},
                              data={"model": "demo-en-asr"})
            got = t.json().get("text", "") if t.status_code == 200 else t.text
            ref = "the prisoners were taken to the court in the morning"
            errs = word_errors(ref, got)
            check(t.status_code == 200 and errs <= 1,
                  "round trip through the server: %r (%d word errors)" % (got, errs))
finally:
    srv.proc.terminate()
    srv.proc.wait(30)
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
