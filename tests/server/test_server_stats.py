#!/usr/bin/env python3
"""Statistics and OpenAI answers of a real `hark serve` with the bundled demo recognizer (issue 23):
/v2/models/<m>/stats lists batch_stats (one entry per batch size run, its executions in count)
and counts compute_input for every success; requests refused for their input (a WAV tensor of the
wrong type, audio that does not decode, a bad option) are failures; a KIND_GPU instance group that
fell back to the CPU is reported KIND_CPU in /config; /v1/audio/translations answers 400 in
OpenAI's error object, as do the OpenAI routes' other errors; a language other than the one the
model declares is refused.
Usage: test_server_stats.py HARK_BIN. Run from the repository root. Exit 0 = pass."""
import json, os, re, shutil, struct, sys, tempfile

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server, pcm16k  # noqa: E402

hark = sys.argv[1]
EX = "examples/demo-en"
names = sorted(l.split(" ", 1)[0] for l in open(os.path.join(EX, "trans.txt")))
check = Checks()

tmp = tempfile.mkdtemp(prefix="hark-stats-")
repo = os.path.join(tmp, "repo")
shutil.copytree("models/demo-en-asr", os.path.join(repo, "demo_s"))
cp = os.path.join(repo, "demo_s", "config.pbtxt")
txt = open(cp).read()
txt = re.sub(r'name: "[^"]*"', 'name: "demo_s"', txt, count=1)
txt = re.sub(r"instance_group \[.*?\n\]", "instance_group [\n  { count: 1 kind: KIND_GPU }\n]",
             txt, flags=re.S)
open(cp, "w").write(txt)


def pcm(name):
    return [v / 32768.0 for v in pcm16k(os.path.join(EX, name + ".wav"))]


def kserve(srv, samples, dtype="FP32", params=None):
    wav = struct.pack("<%df" % len(samples), *samples)
    lens = struct.pack("<i", len(samples))
    h = {"inputs": [
        {"name": "WAV", "shape": [1, len(samples)], "datatype": dtype,
         "parameters": {"binary_data_size": len(wav)}},
        {"name": "WAV_LENS", "shape": [1, 1], "datatype": "INT32",
         "parameters": {"binary_data_size": len(lens)}}],
        "outputs": [{"name": "TRANSCRIPTS", "parameters": {"binary_data": True}}]}
    if params:
        h["parameters"] = params
    hb = json.dumps(h).encode()
    return requests.post(srv.base + "/v2/models/demo_s/infer", data=hb + wav + lens,
                         headers={"Inference-Header-Content-Length": str(len(hb))})


def stats(srv):
    r = requests.get(srv.base + "/v2/models/demo_s/stats")
    return r.json()["model_stats"][0]


def openai_error_object(r, status):
    try:
        e = r.json()["error"]
    except Exception:
        return False
    return (r.status_code == status and isinstance(e.get("message"), str) and e["message"]
            and "type" in e and "param" in e and "code" in e)


srv = Server(hark, repo)
try:
    srv.wait_ready()
    # the instance group asked for a GPU; without one hark can use it runs on the CPU, and says so
    fell_back = any("asks for KIND_GPU but no GPU" in l for l in srv.early + srv.log)
    cfg = requests.get(srv.base + "/v2/models/demo_s/config").json()
    kind = cfg["instance_group"][0]["kind"]
    check(kind == ("KIND_CPU" if fell_back else "KIND_GPU"),
          "config reports the kind that runs (%s; fell back: %s)" % (kind, fell_back))
    ok = 0
    for n in names:
        r = kserve(srv, pcm(n))
        ok += r.status_code == 200
    with open(os.path.join(EX, names[0] + ".wav"), "rb") as f:
        data = f.read()
    r = requests.post(srv.base + "/v1/audio/transcriptions", files={"file": ("a.wav", data)},
                      data={"model": "demo_s"})
    ok += r.status_code == 200
    check(ok == len(names) + 1, "%d of %d requests answered" % (ok, len(names) + 1))
    # three refusals: a tensor of the wrong type, audio that does not decode, a bad option
    bad = [kserve(srv, pcm(names[0]), dtype="INT32").status_code,
           requests.post(srv.base + "/v1/audio/transcriptions",
                         files={"file": ("a.wav", b"RIFF....WAVEnot audio at all")},
                         data={"model": "demo_s"}).status_code,
           kserve(srv, pcm(names[0]), params={"beam_size": -5}).status_code]
    check(all(c == 400 for c in bad), "the refusals are 400s: %s" % bad)
    st = stats(srv)
    inf = st["inference_stats"]
    check(inf["success"]["count"] == ok, "success %s" % inf["success"])
    check(inf["fail"]["count"] == 3, "refused requests are failures: fail %s" % inf["fail"])
    check(inf["compute_input"]["count"] == ok and inf["compute_input"]["ns"] > 0,
          "compute_input %s" % inf["compute_input"])
    bs = st["batch_stats"]
    check(len(bs) >= 1 and all(b["batch_size"] >= 1 for b in bs), "batch_stats %s" % bs)
    check(sum(b["compute_infer"]["count"] for b in bs) == st["execution_count"],
          "batch_stats count every execution (%d)" % st["execution_count"])
    check(sum(b["batch_size"] * b["compute_infer"]["count"] for b in bs) == st["inference_count"],
          "batch_stats cover every inference (%d)" % st["inference_count"])
    check(all(b["compute_input"]["ns"] > 0 for b in bs), "batch_stats compute_input > 0")
    # OpenAI: translations is a clear 400, and the other routes' errors are OpenAI error objects
    r = requests.post(srv.base + "/v1/audio/translations", files={"file": ("a.wav", data)},
                      data={"model": "demo_s"})
    check(openai_error_object(r, 400) and "cannot translate" in r.json()["error"]["message"]
          and "/v1/audio/transcriptions" in r.json()["error"]["message"],
          "translations: %d %s" % (r.status_code, r.text[:200]))
    r = requests.get(srv.base + "/v1/audio/transcriptions")
    check(openai_error_object(r, 405), "GET transcriptions: %d %s" % (r.status_code, r.text[:200]))
    r = requests.post(srv.base + "/v1/audio/transcriptions", files={"nofile": ("a", b"x")})
    check(openai_error_object(r, 400), "no file part: %d %s" % (r.status_code, r.text[:200]))
    # the model declares its language (parameter language "en"): another one is refused by name,
    # its own (code or name) is answered, and verbose_json names it
    r = requests.post(srv.base + "/v1/audio/transcriptions", files={"file": ("a.wav", data)},
                      data={"model": "demo_s", "language": "fr"})
    check(openai_error_object(r, 400) and r.json()["error"]["param"] == "language"
          and "english only" in r.json()["error"]["message"],
          "language=fr on an English model: %d %s" % (r.status_code, r.text[:200]))
    for lang in ("en", "English"):
        r = requests.post(srv.base + "/v1/audio/transcriptions", files={"file": ("a.wav", data)},
                          data={"model": "demo_s", "language": lang,
                                "response_format": "verbose_json"})
        check(r.status_code == 200 and r.json()["language"] == "english",
              "language=%s: %d %s" % (lang, r.status_code, r.text[:120]))
finally:
    code = srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)
check(code == 0, "clean exit (%s)" % code)
check.exit()
