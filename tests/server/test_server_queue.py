#!/usr/bin/env python3
"""max_queue_size counts requests, and a request of several batch items is queued or refused as a
whole (issue 23), through a real `hark serve` with the bundled demo recognizer: with
max_queue_size 2 and a queue delay far longer than the test, a 3-item and a 5-item request both
wait in the queue (two requests, eight items), a 2-item request and an OpenAI transcription are
refused with 503 + Retry-After, and unloading the model runs the two waiting ones, every item
answered. No sleeps: the test waits on the pending-request gauge of /metrics.
Usage: test_server_queue.py HARK_BIN. Run from the repository root. Exit 0 = pass."""
import json, os, re, shutil, struct, sys, tempfile, threading, time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server, pcm16k, texts_of  # noqa: E402

hark = sys.argv[1]
EX = "examples/demo-en"
refs = dict(l.rstrip("\n").split(" ", 1) for l in open(os.path.join(EX, "trans.txt")))
names = sorted(refs)
check = Checks()

tmp = tempfile.mkdtemp(prefix="hark-queue-")
repo = os.path.join(tmp, "repo")
shutil.copytree("models/demo-en-asr", os.path.join(repo, "demo_q"))
cp = os.path.join(repo, "demo_q", "config.pbtxt")
txt = open(cp).read()
txt = re.sub(r'name: "[^"]*"', 'name: "demo_q"', txt, count=1)
txt = re.sub(r"dynamic_batching \{[^}]*\}", "dynamic_batching {\n"
             "  max_queue_delay_microseconds: 600000000\n"
             "  default_queue_policy { max_queue_size: 2 }\n}", txt)
txt = txt.replace("KIND_GPU", "KIND_CPU")
open(cp, "w").write(txt)


def pcm(name):
    return pcm16k(os.path.join(EX, name + ".wav"))


audio = {u: pcm(u) for u in names}


def body(us):
    """a binary KServe request of len(us) items: WAV [B, T] padded, WAV_LENS [B, 1]"""
    T = max(len(audio[u]) for u in us)
    flat = []
    for u in us:
        flat += [v / 32768.0 for v in audio[u]] + [0.0] * (T - len(audio[u]))
    wav = struct.pack("<%df" % len(flat), *flat)
    lens = struct.pack("<%di" % len(us), *[len(audio[u]) for u in us])
    h = json.dumps({"inputs": [
        {"name": "WAV", "shape": [len(us), T], "datatype": "FP32",
         "parameters": {"binary_data_size": len(wav)}},
        {"name": "WAV_LENS", "shape": [len(us), 1], "datatype": "INT32",
         "parameters": {"binary_data_size": len(lens)}}],
        "outputs": [{"name": "TRANSCRIPTS", "parameters": {"binary_data": True}}]}).encode()
    return h, h + wav + lens


def infer(us):
    h, b = body(us)
    return requests.post(srv.base + "/v2/models/demo_q/infer", data=b, timeout=600,
                         headers={"Inference-Header-Content-Length": str(len(h)),
                                  "Content-Type": "application/octet-stream"})


def pending():
    m = re.search(r'nv_inference_pending_request_count\{model="demo_q",version="1"\} (\d+)',
                  requests.get("http://127.0.0.1:%d/metrics" % srv.metrics_port).text)
    return int(m.group(1)) if m else None


def wait_pending(n, secs=120):
    t0 = time.time()
    while pending() != n and time.time() - t0 < secs:
        time.sleep(0.02)  # polling, not a race: the state waited for does not pass by itself
    return pending() == n


def in_thread(us, out):
    t = threading.Thread(target=lambda: out.append(infer(us)))
    t.start()
    return t


srv = Server(hark, repo, metrics=True,  # (unloads through the API: explicit mode)
             args=["--model-control-mode", "explicit", "--load-model", "*"])
try:
    srv.wait_ready(120)
    check(pending() == 0, "demo_q ready, nothing pending")
    A, B = names[:3], (names * 2)[:5]
    ra, rb = [], []
    ta = in_thread(A, ra)
    check(wait_pending(1), "a 3-item request is one pending request (of max_queue_size 2)")
    tb = in_thread(B, rb)
    check(wait_pending(2), "a 5-item request is the second (8 items queued, 2 requests)")
    r = infer(names[:2])
    check(r.status_code == 503 and r.headers.get("Retry-After") and "Exceeds maximum queue size" in r.text,
          "a third request, of 2 items, refused whole: 503 + Retry-After (%d %s)" %
          (r.status_code, r.text[:160]))
    r = requests.post(srv.base + "/v1/audio/transcriptions", data={"model": "demo_q"},
                      files={"file": ("a.wav", open(os.path.join(EX, A[0] + ".wav"), "rb"),
                                      "audio/wav")})
    check(r.status_code == 503 and r.headers.get("Retry-After"),
          "an OpenAI transcription refused too: 503 (%d %s)" % (r.status_code, r.text[:160]))
    check(pending() == 2 and not ra and not rb, "the two still wait, unanswered")
    # unloading drains the queue: the two run, every item answered
    check(requests.post(srv.base + "/v2/repository/models/demo_q/unload").status_code == 200,
          "demo_q unloaded")
    ta.join(300)
    tb.join(300)
    for name, us, rr in (("3-item", A, ra), ("5-item", B, rb)):
        ok = rr and rr[0].status_code == 200
        got = texts_of(rr[0].content[int(rr[0].headers["Inference-Header-Content-Length"]):]) \
            if ok else None
        check(ok and got == [refs[u] for u in us],
              "the %s request answered whole: %s" %
              (name, got if ok else (rr and (rr[0].status_code, rr[0].text[:160]))))
finally:
    code = srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)
if code != 0:
    print("".join(srv.log[-30:]))
check(code == 0, "server exited cleanly (%s)" % code)
check.exit()
