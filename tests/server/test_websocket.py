#!/usr/bin/env python3
"""Integration test of WeNet's WebSocket streaming protocol on the HTTP port (run by
tests/server/test_websocket_integration.c): a real `hark serve` with the golden WeNet U2++ model
under sequence_batching, a raw-socket RFC 6455 client sending {"signal":"start"}, 16-bit PCM
frames and {"signal":"end"} as WeNet's websocket client does; partial results, the final result
equal to WeNet's streaming golden, speech_end; protocol errors; HTTP still served beside it; a
client that goes away frees its sequence; SIGTERM with a connection open.
Usage: test_websocket.py HARK_BIN MODEL_DIR GOLDEN_DIR. Exit 0 = pass."""
import json, os, re, shutil, signal, socket, struct, subprocess, sys, tempfile
import threading, time, wave

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harkserve  # noqa: E402

hark, model_dir, golden = sys.argv[1:4]
tmp = tempfile.mkdtemp(prefix="hark-ws-")
R = json.load(open(os.path.join(golden, "results.json")))
MODE = "stream_chunk16_left-1"
base_cfg = open(os.path.join(model_dir, "config.pbtxt")).read()
repo = os.path.join(tmp, "repo")
d = os.path.join(repo, "streaming_wenet")
os.makedirs(d)
os.symlink(os.path.join(os.path.abspath(model_dir), "1"), os.path.join(d, "1"))
seq = "sequence_batching {\n  max_sequence_idle_microseconds: 30000000\n" \
      "  oldest { max_candidate_sequences: 1 }\n}"
txt = re.sub(r"dynamic_batching \{[^}]*\}", seq, base_cfg).replace("KIND_GPU", "KIND_CPU")
open(os.path.join(d, "config.pbtxt"), "w").write(re.sub(r'name: "[^"]*"', 'name: "streaming_wenet"', txt, count=1))

proc = subprocess.Popen([hark, "serve", "--model-repository", repo, "--http-port", "0",
                         "--grpc-port", "-1", "--metrics-port", "-1", "--drain-timeout-ms", "3000"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
line = proc.stdout.readline()
m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
assert m, "no startup line: " + line
port = int(m.group(1))
base = "http://127.0.0.1:%d" % port
log = []
threading.Thread(target=lambda: [log.append(l) for l in proc.stdout], daemon=True).start()
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def WS(path="/"):
    return harkserve.WS(port, path)


def pcm16(u):
    raw = open(os.path.join(golden, "wavs", u + ".wav"), "rb").read()
    n = wave.open(os.path.join(golden, "wavs", u + ".wav")).getnframes()
    return raw[raw.index(b"data") + 8:][:2 * n]


try:
    t0 = time.time()
    while requests.get(base + "/v2/health/ready").status_code != 200:
        assert time.time() - t0 < 120, "not ready within 120 s"
        time.sleep(0.1)
    u = "sense_and_sensibility_01_austen_64kb-0880"
    gold = R[u][MODE]["attention_rescoring"]["text"]
    audio = pcm16(u)
    ws = WS("/?model=streaming_wenet")
    check(ws.ok, "handshake: 101 with the right Sec-WebSocket-Accept (%r)" % ws.head[:60])
    ws.text({"signal": "start", "nbest": 1, "continuous_decoding": False})
    msgs, _ = ws.messages("server_ready")
    check(msgs and msgs[-1] == {"status": "ok", "type": "server_ready"}, "start: server_ready")
    step = 2 * 5120  # 0.32 s frames, as WeNet's client sends
    for i in range(0, len(audio), step):
        ws.send(2, audio[i:i + step])
    ws.text({"signal": "end"})
    msgs, _ = ws.messages("speech_end")
    types = [x.get("type") for x in msgs]
    check(types[-2:] == ["final_result", "speech_end"], "final_result then speech_end (%s)" % types)
    check("partial_result" in types, "partial results before the end")
    fin = [x for x in msgs if x.get("type") == "final_result"]
    best = json.loads(fin[0]["nbest"])[0]["sentence"] if fin else None
    check(best == gold, "final sentence = WeNet streaming golden (%r)" % best)
    part = [json.loads(x["nbest"])[0]["sentence"] for x in msgs if x.get("type") == "partial_result"]
    check(all(p for p in part), "partial results carry text")
    ws.s.close()
    check(requests.get(base + "/v2/health/live").status_code == 200, "HTTP served beside WebSocket")

    # endpointing (always on, as in WeNet's server): jfk, 2 s of low noise, LJ001-0002
    rng = __import__("random").Random(7)
    gap = struct.pack("<%dh" % 32000, *[rng.randint(-24, 24) for _ in range(32000)])
    long_audio = pcm16("jfk") + gap + pcm16("LJ001-0002")

    def session(cont):
        w = WS("/")
        w.text({"signal": "start", "nbest": 1, "continuous_decoding": cont})
        w.messages("server_ready")
        try:  # without continuous decoding the server closes once recognition stopped
            for i in range(0, len(long_audio), step):
                w.send(2, long_audio[i:i + step])
            w.text({"signal": "end"})
        except OSError:
            pass
        out = []
        while True:  # every message up to the close
            op, p = w.recv()
            if op is None or op == 8:
                break
            if op == 1:
                out.append(json.loads(p))
        w.s.close()
        return out

    msgs = session(True)
    types = [x.get("type") for x in msgs]
    fins = [json.loads(x["nbest"])[0] for x in msgs if x.get("type") == "final_result"]
    said = [f for f in fins if f["sentence"]]
    check(len(said) >= 2 and all(f["word_pieces"] for f in said),
          "continuous: >= 2 final results with word_pieces (%s)" % [f["sentence"] for f in fins])
    starts = [wp["start"] for f in said for wp in f["word_pieces"]]
    check(starts == sorted(starts) and all(wp["end"] >= wp["start"] for f in said for wp in f["word_pieces"])
          and len(said) >= 2 and said[-1]["word_pieces"][-1]["end"] > 13000,
          "continuous: word times (ms of the stream) increase across segments, the last one "
          "reaching the utterance after the gap (%s)" %
          [(f["word_pieces"][0]["start"], f["word_pieces"][-1]["end"]) for f in said])
    check(types[-2:] == ["final_result", "speech_end"] and types.count("speech_end") == 1,
          "continuous: final_result, speech_end at the end (%s)" % types)
    check(all(json.loads(x["nbest"])[0]["sentence"] and "word_pieces" not in json.loads(x["nbest"])[0]
              for x in msgs if x.get("type") == "partial_result"),
          "continuous: partial results carry text, no word_pieces")

    msgs = session(False)
    types = [x.get("type") for x in msgs]
    check(types.count("final_result") == 1 and types[-2:] == ["final_result", "speech_end"],
          "not continuous: one final_result then speech_end, nothing after (%s)" % types)
    fin = [json.loads(x["nbest"])[0] for x in msgs if x.get("type") == "final_result"]
    check(fin and fin[0]["sentence"] and fin[0]["word_pieces"] and
          fin[0]["word_pieces"][-1]["end"] <= 11500,
          "not continuous: the first segment's words, within jfk (%s)" % fin)

    # the one slot came back: a second session works; a client that goes away frees its slot
    ws = WS("/")
    ws.text({"signal": "start"})
    ws.messages("server_ready")
    ws.send(2, audio[:step])
    ws.send(2, audio[step:2 * step])
    time.sleep(0.5)
    ws.s.close()  # gone mid-utterance
    time.sleep(0.5)
    ws = WS("/")
    ws.text({"signal": "start"})
    ws.messages("server_ready")
    ws.send(2, audio)
    ws.text({"signal": "end"})
    msgs, _ = ws.messages("speech_end")
    fin = [x for x in msgs if x.get("type") == "final_result"]
    check(fin and json.loads(fin[0]["nbest"])[0]["sentence"] == gold,
          "after a client went away its slot is free: whole audio in one frame = golden (%s)" %
          [x.get("message") for x in msgs if x.get("status") == "failed"])
    ws.s.close()

    # protocol errors: a failed status, then the close
    ws = WS("/")
    ws.send(2, audio[:100])
    msgs, op = ws.messages("none")
    check(msgs and msgs[0].get("status") == "failed" and "Start signal" in msgs[0].get("message", ""),
          "binary before start: failed (%s)" % msgs)
    ws = WS("/")
    ws.send(1, b"not json")
    msgs, op = ws.messages("none")
    check(msgs and msgs[0].get("status") == "failed", "bad text: failed")
    ws = WS("/?model=nope")
    ws.text({"signal": "start"})
    ws.messages("server_ready")
    ws.send(2, audio[:step])
    ws.text({"signal": "end"})
    msgs, op = ws.messages("speech_end")
    check(msgs and msgs[-1].get("status") == "failed" and "nope" in msgs[-1].get("message", ""),
          "unknown model: failed naming it")
    r = requests.get(base + "/", headers={"Upgrade": "websocket", "Connection": "Upgrade"})
    check(r.status_code == 400, "upgrade without a key: 400")

    # SIGTERM with a session open: the server closes it and exits
    ws = WS("/")
    ws.text({"signal": "start"})
    ws.messages("server_ready")
    proc.send_signal(signal.SIGTERM)
    check(proc.wait(timeout=30) == 0, "SIGTERM with a WebSocket open: exit 0")
except Exception as e:  # noqa: BLE001
    import traceback
    traceback.print_exc()
    failures.append("exception: %r" % e)
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if failures:
        print("".join(log[-40:]))
    shutil.rmtree(tmp, ignore_errors=True)

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
