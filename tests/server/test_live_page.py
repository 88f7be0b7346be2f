#!/usr/bin/env python3
"""The live page of `hark serve` (run by tests/server/test_live_page.c): a real server with the
golden WeNet U2++ model under sequence_batching, and Debian's headless Chromium driven by
chromedriver, a speech file as the microphone (--use-file-for-fake-audio-capture). The page lists
the streaming model, the microphone button starts a WebSocket session, partial words appear, and
after Stop the final lines settle. Those lines must be exactly what the server gives a plain
WebSocket client (python3-websocket) for the very samples the page sent (the page keeps them with
?debug=1), and those samples must be the file's speech.
Usage: test_live_page.py HARK_BIN MODEL_DIR WAV. Exit 0 = pass."""
import json, os, re, shutil, subprocess, sys, tempfile, threading, time, wave

import numpy as np
import websocket
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

hark, model_dir, wav = sys.argv[1:4]
tmp = tempfile.mkdtemp(prefix="hark-live-")
repo = os.path.join(tmp, "repo")
d = os.path.join(repo, "streaming_wenet")
os.makedirs(d)
os.symlink(os.path.join(os.path.abspath(model_dir), "1"), os.path.join(d, "1"))
cfg = open(os.path.join(model_dir, "config.pbtxt")).read()
seq = ("sequence_batching {\n  max_sequence_idle_microseconds: 30000000\n"
       "  oldest { max_candidate_sequences: 2 }\n}")
cfg = re.sub(r"dynamic_batching \{[^}]*\}", seq, cfg).replace("KIND_GPU", "KIND_CPU")
open(os.path.join(d, "config.pbtxt"), "w").write(
    re.sub(r'name: "[^"]*"', 'name: "streaming_wenet"', cfg, count=1))
# an ordinary (offline) model too: the page must not offer it
o = os.path.join(repo, "offline")
os.makedirs(o)
os.symlink(os.path.join(os.path.abspath(model_dir), "1"), os.path.join(o, "1"))
open(os.path.join(o, "config.pbtxt"), "w").write(
    re.sub(r'name: "[^"]*"', 'name: "offline"', cfg.replace(seq, ""), count=1))

w = wave.open(wav)
rate, n = w.getframerate(), w.getnframes()
speech = np.frombuffer(w.readframes(n), "<i2").astype(np.float64) / 32768.0
dur = n / rate

proc = subprocess.Popen([hark, "serve", "--model-repository", repo, "--http-port", "0",
                         "--grpc-port", "-1", "--metrics-port", "-1"],
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


def wait(fn, secs, what):
    t0 = time.time()
    while time.time() - t0 < secs:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise TimeoutError(what)


def ws_finals(samples):
    """the server's final results for samples (int16) through a plain WebSocket client"""
    c = websocket.create_connection("ws://127.0.0.1:%d/?model=streaming_wenet" % port, timeout=60)
    c.send(json.dumps({"signal": "start", "nbest": 1, "continuous_decoding": True}))
    for i in range(0, len(samples), 1600):
        c.send_binary(samples[i:i + 1600].astype("<i2").tobytes())
    c.send(json.dumps({"signal": "end"}))
    finals = []
    while True:
        msg = json.loads(c.recv())
        assert msg["status"] == "ok", msg
        if msg["type"] == "final_result":
            t = json.loads(msg["nbest"])[0]["sentence"] if msg["nbest"] else ""
            if t:
                finals.append(t)
        if msg["type"] == "speech_end":
            break
    c.close()
    return finals


driver = None
try:
    import requests
    wait(lambda: requests.get(base + "/v2/models/streaming_wenet/ready").status_code == 200 and
         requests.get(base + "/v2/models/offline/ready").status_code == 200, 120, "models ready")
    page = requests.get(base + "/")
    check(page.status_code == 200 and "text/html" in page.headers.get("Content-Type", "") and
          "<script>" in page.text and "http://" not in page.text and "https://" not in page.text
          and " src=" not in page.text, "GET / is the page, with nothing fetched from elsewhere")
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
              "--use-file-for-fake-audio-capture=%s%%noloop" % os.path.abspath(wav),
              "--autoplay-policy=no-user-gesture-required", "--user-data-dir=" + tmp + "/chrome"):
        opts.add_argument(a)
    opts.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    driver.get(base + "/?debug=1")
    mic = driver.find_element(By.ID, "mic")
    wait(lambda: mic.is_enabled(), 30, "the microphone button enabled")
    names = [e.get_attribute("value") for e in driver.find_elements(By.CSS_SELECTOR, "#model option")]
    check(names == ["streaming_wenet"], "the page offers the streaming model only (%s)" % names)
    mic.click()
    state = lambda: driver.execute_script("return document.body.dataset.state")
    wait(lambda: state() == "listening", 20, "listening")
    partials = set()
    t0 = time.time()
    while time.time() - t0 < dur + 2.0:  # the file plays in real time, then silence
        p = driver.find_element(By.ID, "partial").text
        if p:
            partials.add(p)
        time.sleep(0.05)
    mic.click()  # Stop: the end signal, then the final result and speech_end
    wait(lambda: state() == "done", 30, "done after Stop")
    finals = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#finals .final")]
    sent = np.array(driver.execute_script(
        "return [].concat(...window.harkSent.map(a => Array.from(a)))"), dtype=np.int64)
    check(len(partials) >= 1, "partial words appeared while speaking (%d distinct)" % len(partials))
    check(len(finals) >= 1 and all(finals), "final lines settled: %s" % finals)
    # the samples the page sent are the file's speech (at 16 kHz), in order
    x = sent.astype(np.float64) / 32768.0
    ref = speech if rate == 16000 else np.interp(np.arange(0, n, rate / 16000.0), np.arange(n), speech)
    def best_corr(x, r):  # every alignment at once (FFT), each normalised by its segment
        if len(x) < len(r):
            return 0.0
        L = 1 << int(np.ceil(np.log2(len(x) + len(r))))
        xc = np.fft.irfft(np.fft.rfft(x, L) * np.conj(np.fft.rfft(r, L)), L)[:len(x) - len(r) + 1]
        c2 = np.concatenate([[0.0], np.cumsum(x * x)])
        seg = np.sqrt(c2[len(r):] - c2[:len(x) - len(r) + 1]) * np.linalg.norm(r) + 1e-12
        return float(np.max(xc / seg))
    # the file's eighths found in what the page sent: a loaded machine may glitch the fake
    # microphone now and then (a dropped or repeated buffer), so 6 of 8 must match
    q = len(ref) // 8
    cs = [best_corr(x, ref[i * q:(i + 1) * q]) for i in range(8)]
    check(len(x) >= 0.8 * len(ref) and sum(c > 0.9 for c in cs) >= 6,
          "the page sent the file's speech: %d samples, each eighth's correlation %s" %
          (len(x), ["%.3f" % c for c in cs]))
    ref_finals = ws_finals(sent)
    check(finals == ref_finals,
          "the page's final lines = the server's answer to a WebSocket client for the same samples "
          "(%s vs %s)" % (finals, ref_finals))
except Exception as e:  # noqa: BLE001
    import traceback
    traceback.print_exc()
    failures.append("exception: %r" % e)
finally:
    if driver:
        driver.quit()
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    if failures:
        print("".join(log[-30:]))
    shutil.rmtree(tmp, ignore_errors=True)

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
