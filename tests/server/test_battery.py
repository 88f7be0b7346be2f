#!/usr/bin/env python3
"""The reliability battery of issue 23 against a real `hark serve` with the bundled demo
recognizer (models/demo-en-asr, CPU; nothing from ../shared): malformed request lines, 1 MB
headers, slowloris, pipelining (in order; a client that pipelines and never reads holds the
server's memory bounded, defect 2), resets mid-body, hundreds of idle connections, keep-alive
storms, lying Content-Length and binary tensor sizes, NaN/Inf, empty and oversized audio, corrupt
WAV/FLAC/MP3 headers, the strict KServe inputs (defect 7), bad model repositories, load/unload
cycles under traffic (explicit mode), overload beyond the queue (503 + Retry-After), SIGTERM with
requests in flight (all answered, exit 0) and a short soak (RSS flat, outputs identical).
Quick by default (make test); --full runs the sizes of the issue (1,000 idle connections, 100
load/unload cycles, a 10-minute soak, 50 requests in flight at SIGTERM): tools/battery.sh.
Usage: test_battery.py HARK_BIN [--full] [--only SECTION,...] (the names in SECTIONS below).
Run from the repository root. Exit 0 = pass."""
import concurrent.futures as cf
import http.client, json, os, re, resource, select, shutil, signal, socket, struct, sys, tempfile
import threading, time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server, pcm16k, texts_of  # noqa: E402

hark = sys.argv[1]
FULL = "--full" in sys.argv[2:]
ONLY = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
SIZE = dict(idle=1000 if FULL else 300, cycles=100 if FULL else 8,
            soak_s=600 if FULL else 8, inflight=50 if FULL else 12,
            pipeline_mb=50 if FULL else 12)
DEMO, EX = "models/demo-en-asr", "examples/demo-en"
refs = dict(l.rstrip("\n").split(" ", 1) for l in open(os.path.join(EX, "trans.txt")))
names = sorted(refs)
check = Checks()
T0 = time.time()
# An AddressSanitizer build (CI's sanitizer step) keeps freed memory in its quarantine (256 MB by
# default) and pads every block, so its RSS is not the server's: the memory bounds below are
# asserted in the normal build (make test) and only reported under ASan.
with open(hark, "rb") as f_:
    ASAN = b"__asan_init" in f_.read()


def check_rss(ok, what):
    if ASAN:
        print("note %s (not asserted: an AddressSanitizer build)" % what, flush=True)
    else:
        check(ok, what)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < min(hard, 4096):  # idle connections: one descriptor each
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))


def section(name):
    print("-- %s (%.1f s)" % (name, time.time() - T0), flush=True)


# ---- models ------------------------------------------------------------------------------------

def add_model(repo, name, edit=None, batching=None):
    """a copy of the demo recognizer called name on the CPU; edit(text) -> text changes its config;
    batching replaces its dynamic_batching block"""
    d = os.path.join(repo, name)
    shutil.copytree(DEMO, d, ignore=shutil.ignore_patterns("README.md"))
    cp = os.path.join(d, "config.pbtxt")
    txt = open(cp).read()
    txt = re.sub(r'name: "[^"]*"', 'name: "%s"' % name, txt, count=1)
    txt = txt.replace("KIND_GPU", "KIND_CPU")
    if batching:
        txt = re.sub(r"dynamic_batching \{[^}]*\}", "dynamic_batching {\n%s\n}" % batching, txt)
    if edit:
        txt = edit(txt)
    open(cp, "w").write(txt)
    return d


def pcm(name):
    return pcm16k(os.path.join(EX, name + ".wav"))


audio = {u: pcm(u) for u in names}
wav_files = {u: open(os.path.join(EX, u + ".wav"), "rb").read() for u in names}


def wav_bytes(samples, rate=16000):
    """a 16-bit mono WAV file of samples (ints)"""
    data = struct.pack("<%dh" % len(samples), *samples)
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16) + b"data" +
            struct.pack("<I", len(data)) + data)


def f32(samples):
    return [v / 32768.0 for v in samples]


def kserve_body(inputs, outputs=("TRANSCRIPTS",), params=None):
    """a binary KServe body: inputs [(name, datatype, shape, raw bytes)] -> (header len, body)"""
    h = {"inputs": [{"name": n, "shape": list(s), "datatype": dt,
                     "parameters": {"binary_data_size": len(b)}} for n, dt, s, b in inputs],
         "outputs": [{"name": o, "parameters": {"binary_data": True}} for o in outputs]}
    if params:
        h["parameters"] = params
    hb = json.dumps(h).encode()
    return len(hb), hb + b"".join(b for _, _, _, b in inputs)


def wav_inputs(us):
    T = max(len(audio[u]) for u in us)
    flat = []
    for u in us:
        flat += f32(audio[u]) + [0.0] * (T - len(audio[u]))
    return [("WAV", "FP32", (len(us), T), struct.pack("<%df" % len(flat), *flat)),
            ("WAV_LENS", "INT32", (len(us), 1), struct.pack("<%di" % len(us),
                                                            *[len(audio[u]) for u in us]))]


def audio_inputs(files):
    blob = b"".join(struct.pack("<I", len(f)) + f for f in files)
    return [("AUDIO", "BYTES", (len(files),), blob)]


class Client:
    """requests against one server: infer(model, inputs) -> (status, texts | error, headers)"""

    def __init__(self, srv):
        self.srv = srv
        self.s = requests.Session()

    def infer(self, model, inputs, params=None, outputs=("TRANSCRIPTS",), raw=None):
        hl, body = raw if raw else kserve_body(inputs, outputs, params)
        try:
            r = self.s.post("%s/v2/models/%s/infer" % (self.srv.base, model), data=body,
                            timeout=120, headers={"Inference-Header-Content-Length": str(hl),
                                                  "Content-Type": "application/octet-stream"})
        except requests.RequestException as e:
            return -1, "%s: %s" % (type(e).__name__, e), {}
        if r.status_code != 200:
            try:
                return r.status_code, r.json().get("error", r.text), r.headers
            except ValueError:
                return r.status_code, r.text, r.headers
        h = int(r.headers["Inference-Header-Content-Length"])
        return 200, texts_of(r.content[h:]), r.headers


def raw_exchange(port, data, timeout=5.0, half_close=True, linger_rst=False):
    """sends data on a fresh connection (then FIN, or RST with linger_rst) and reads until the
    server closes or the timeout; the bytes read ('' on reset)"""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    got = b""
    try:
        try:
            s.sendall(data)
        except OSError:
            pass
        if linger_rst:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return b""
        if half_close:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        while True:
            try:
                b = s.recv(65536)
            except (socket.timeout, ConnectionError):
                break
            if not b:
                break
            got += b
    finally:
        s.close()
    return got


def status_of(resp):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", resp)
    return int(m.group(1)) if m else None


def rss_mb(pid):
    for l in open("/proc/%d/status" % pid):
        if l.startswith("VmRSS:"):
            return int(l.split()[1]) / 1024.0
    return 0.0


def alive(srv):
    try:
        return srv.proc.poll() is None and \
            requests.get(srv.base + "/v2/health/live", timeout=10).status_code == 200
    except requests.RequestException:
        return False


def index(srv):
    return {e["name"]: e for e in requests.post(srv.base + "/v2/repository/index").json()}


def wait_for(cond, secs=120):
    """polls cond() until true (a state that does not pass by itself); False after secs"""
    t0 = time.time()
    while not cond():
        if time.time() - t0 > secs:
            return False
        time.sleep(0.05)
    return True


def pending(srv, model):
    m = re.search(r'nv_inference_pending_request_count\{model="%s",version="1"\} (\d+)' % model,
                  requests.get("http://127.0.0.1:%d/metrics" % srv.metrics_port).text)
    return int(m.group(1)) if m else None


# ---- the sections (main server) ----------------------------------------------------------------

def malformed(srv):
    section("malformed request lines")
    cases = [b"GARBAGE\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
             b"GET /v2/health/live HTTP/1.1\r\nNo colon here\r\n\r\n",
             b"\x00\x01\x02\xff\xfe\r\n\r\n", b"GET /v2 HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
             b"GET /v2 HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
             b"POST /v2 HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
             b"POST /v2 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n",
             b"POST /v2 HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
             b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\n\r\n",
             b"G\xc3\x89T / HTTP/1.1\r\n\r\n", b"GET /v2/health/live HTTP/1.1\r\n\tfolded\r\n\r\n"]
    bad = []
    for c in cases:
        st = status_of(raw_exchange(srv.port, c))
        if st is None or not 400 <= st < 600:
            bad.append((c[:40], st))
    check(not bad, "%d malformed requests answered 4xx/5xx and closed (%r)" % (len(cases), bad))
    check(alive(srv), "the server answers after them")


def big_headers(srv):
    section("1 MB headers")
    req = b"GET /v2/health/live HTTP/1.1\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
    st = status_of(raw_exchange(srv.port, req))
    check(st == 431, "a 1 MB header: 431 (%s)" % st)
    many = b"GET /v2/health/live HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(20000))
    st = status_of(raw_exchange(srv.port, many + b"\r\n"))
    check(st == 431, "20,000 small headers: 431 (%s)" % st)
    check(alive(srv), "the server answers after them")


def slowloris(srv):
    section("slowloris")
    stop = threading.Event()
    answers = []

    def slow(i):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
        try:
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\n")
            k = 0
            # a header line now and then, never the end of the head, until the server answers
            while not stop.is_set() and not select.select([s], [], [], 0.25)[0]:
                s.sendall(b"X-%d: %d\r\n" % (k, k))
                k += 1
            answers.append(status_of(s.recv(4096)))
        except OSError as e:
            answers.append(type(e).__name__)
        finally:
            s.close()

    ts = [threading.Thread(target=slow, args=(i,)) for i in range(40)]
    for t in ts:
        t.start()
    ok = 0
    for i in range(20):  # others are answered meanwhile
        try:
            ok += requests.get(srv.base + "/v2/health/ready", timeout=10).status_code == 200
        except requests.RequestException:
            pass
    check(ok == 20, "40 slowloris connections: 20 of 20 other requests answered (%d)" % ok)
    # the server ends them (408 once --request-timeout-ms passes) rather than wait forever
    t0 = time.time()
    while time.time() - t0 < 20 and len(answers) < len(ts):
        time.sleep(0.1)
    stop.set()
    for t in ts:
        t.join()
    n408 = answers.count(408)
    check(n408 == len(ts), "every slowloris connection ended with 408 (%r)" % answers[:6])


def pipelining(srv, model):
    section("pipelining")
    cfg = requests.get("%s/v2/models/%s/config" % (srv.base, model)).content
    meta = requests.get("%s/v2/models/%s" % (srv.base, model)).content
    reqs = []
    for i in range(200):
        k = i % 4
        path = ["/v2/health/live", "/v2/models/%s/config" % model, "/v2/models/%s" % model,
                "/nope/%d" % i][k]
        reqs.append((k, b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode()))
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"".join(r for _, r in reqs))
    f = s.makefile("rb")
    bad = 0
    for k, _ in reqs:
        st = int(f.readline().split()[1])
        clen = 0
        while True:
            l = f.readline()
            if l in (b"\r\n", b""):
                break
            if l.lower().startswith(b"content-length:"):
                clen = int(l.split(b":")[1])
        body = f.read(clen)
        want = [(200, None), (200, cfg), (200, meta), (404, None)][k]
        bad += st != want[0] or (want[1] is not None and body != want[1])
    s.close()
    check(bad == 0, "200 pipelined requests of four kinds: every answer in order (%d wrong)" % bad)

    # defect 2: a client that pipelines and never reads holds a bounded amount of the server's
    # memory; once it reads, every answer arrives intact, and others are served meanwhile
    one = b"GET /v2/models/%s/config HTTP/1.1\r\nHost: x\r\n\r\n" % model.encode()
    n = SIZE["pipeline_mb"] * (1 << 20) // len(one)
    probe = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    probe.sendall(one)
    resp = b""
    while b"\r\n\r\n" not in resp or len(resp) < resp.index(b"\r\n\r\n") + 4 + len(cfg):
        resp += probe.recv(65536)
    probe.close()
    check(resp.endswith(cfg), "the answer to one config request (%d bytes)" % len(resp))
    rss0 = rss_mb(srv.proc.pid)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=120)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    sent = [0]
    chunk = one * 2000

    def sender():
        try:
            left = n
            while left > 0:
                k = min(left, 2000)
                s.sendall(chunk if k == 2000 else one * k)
                left -= k
                sent[0] += k
        except OSError:
            pass

    th = threading.Thread(target=sender)
    th.start()
    peak, last, still = rss0, -1, 0
    t0 = time.time()
    while th.is_alive() and time.time() - t0 < 60:  # until all is sent or the server stops reading
        time.sleep(0.2)
        peak = max(peak, rss_mb(srv.proc.pid))
        still = still + 1 if sent[0] == last else 0
        last = sent[0]
        if still >= 10:  # two seconds without progress: the server no longer reads
            break
    peak = max(peak, rss_mb(srv.proc.pid))
    check_rss(peak - rss0 < 200, "%d MB pipelined (%d requests), not read: server RSS %.0f -> %.0f "
              "MB (%d requests taken so far)" % (SIZE["pipeline_mb"], n, rss0, peak, sent[0]))
    others = []
    for i in range(5):
        try:
            others.append(requests.get(srv.base + "/v2/health/ready", timeout=10).status_code)
        except requests.RequestException as e:
            others.append(type(e).__name__)
    check(others == [200] * 5, "others are answered meanwhile (%r)" % others)
    # now read everything back: n identical answers, byte for byte
    whole = resp * 1000
    buf, got, bad_at = b"", 0, None
    s.settimeout(60)
    while got < n:
        try:
            b = s.recv(1 << 20)
        except OSError:
            break
        if not b:
            break
        buf += b
        while got < n and len(buf) >= len(whole) and n - got >= 1000:
            if buf[:len(whole)] != whole and bad_at is None:
                bad_at = got
            buf = buf[len(whole):]
            got += 1000
        while got < n and n - got < 1000 and len(buf) >= len(resp):
            if buf[:len(resp)] != resp and bad_at is None:
                bad_at = got
            buf = buf[len(resp):]
            got += 1
    th.join(60)
    s.close()
    check(got == n and bad_at is None and not buf,
          "then read: all %d answers arrive, identical (%d, first bad at %s, %d left over)" %
          (n, got, bad_at, len(buf)))
    check(alive(srv), "the server answers after it")


def resets(srv, model):
    section("resets mid-body")
    hl, body = kserve_body(wav_inputs(names[:1]))
    head = ("POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
            "Inference-Header-Content-Length: %d\r\n\r\n" % (model, len(body), hl)).encode()
    cfg = b"GET /v2/models/%s/config HTTP/1.1\r\n\r\n" % model.encode()

    def one(i):
        cut = [10, 1000, len(body) // 2, len(body) - 1][i % 4]
        pre = cfg * (i % 3)  # with answers pipelined ahead of it (they meet a reset socket)
        raw_exchange(srv.port, pre + head + body[:cut], linger_rst=True)
        if i % 5 == 0:  # the whole request, then a reset before the answer is read
            raw_exchange(srv.port, cfg + head + body, linger_rst=True)

    with cf.ThreadPoolExecutor(8) as ex:
        list(ex.map(one, range(80)))
    check(alive(srv), "80 connections reset mid-body (and after whole requests): the server lives")
    st, texts, _ = Client(srv).infer(model, wav_inputs(names[:1]))
    check(st == 200 and texts == [ref_text[names[0]]],
          "and still transcribes (%s %r)" % (st, texts))


def idle_connections(srv):
    section("%d idle connections" % SIZE["idle"])
    socks = []
    for i in range(SIZE["idle"]):
        try:
            socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=10))
        except OSError:
            break
    ok = []
    for i in range(10):
        try:
            ok.append(requests.get(srv.base + "/v2/health/ready", timeout=10).status_code)
        except requests.RequestException as e:
            ok.append(type(e).__name__)
    check(len(socks) == SIZE["idle"] and ok == [200] * 10,
          "%d idle connections open: health still answers (%r)" % (len(socks), ok[:3]))
    for s in socks:
        s.close()


def keepalive_storm(srv, model):
    section("keep-alive storms")

    def session(i):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        codes = []
        for k in range(60):
            c.request("GET", ["/v2/health/ready", "/v2/models/%s/config" % model,
                              "/v2/models/%s/ready" % model][k % 3])
            r = c.getresponse()
            r.read()
            codes.append(r.status)
        c.close()
        return codes

    def short(i):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        c.request("GET", "/v2/health/live", headers={"Connection": "close"})
        st = c.getresponse().status
        c.close()
        return st

    with cf.ThreadPoolExecutor(16) as ex:
        a = [x for codes in ex.map(session, range(32)) for x in codes]
        b = list(ex.map(short, range(400)))
    check(a.count(200) == len(a),
          "32 keep-alive sessions of 60 requests: all 200 (%d)" % a.count(200))
    check(b.count(200) == len(b), "400 connect-request-close: all 200 (%d)" % b.count(200))


def lying_sizes(srv, model):
    section("lying Content-Length and binary sizes")
    url = "/v2/models/%s/infer" % model
    # Content-Length longer than what comes, then the client's FIN: closed, no answer owed
    got = raw_exchange(srv.port, b"POST %s HTTP/1.1\r\nContent-Length: 5000\r\n\r\n{\"in"
                       % url.encode())
    check(status_of(got) in (None, 400), "Content-Length longer than the body, then FIN: "
          "closed (%r)" % got[:40])
    # ... and the client waits: 408 once the request timeout passes
    got = raw_exchange(srv.port,
                       b"POST %s HTTP/1.1\r\nContent-Length: 5000\r\n\r\n{" % url.encode(),
                       timeout=15, half_close=False)
    check(status_of(got) == 408, "Content-Length longer than the body: 408 (%r)" % got[:40])
    # shorter than the body: the rest is read as the next request, which is not one
    got = raw_exchange(srv.port,
                       b"POST %s HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}garbage here\r\n\r\n"
                       % url.encode())
    sts = [int(x) for x in re.findall(rb"HTTP/1\.1 (\d{3})", got)]
    check(len(sts) == 2 and sts[0] == 400 and sts[1] == 400,
          "Content-Length shorter than the body: 400 for the request, 400 for the rest (%r)" % sts)
    got = raw_exchange(srv.port,
                       b"POST %s HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n" % url.encode())
    check(status_of(got) == 413, "Content-Length over --max-body-bytes: 413 (%s)" % status_of(got))
    c = Client(srv)
    wav = wav_inputs(names[:1])
    hl, body = kserve_body(wav)
    cases = [("Inference-Header-Content-Length beyond the body", (len(body) + 10, body)),
             ("Inference-Header-Content-Length inside the JSON", (hl // 2, body)),
             ("binary sizes beyond the body", (hl, body[:-100])),
             ("binary sizes short of the body", (hl, body + b"\0" * 64))]
    for name, size in (("binary_data_size not shape x 4", 12), ("negative binary_data_size", -4),
                       ("binary_data_size 2^62", 1 << 62)):
        hh = json.loads(body[:hl])
        hh["inputs"][0]["parameters"]["binary_data_size"] = size
        hb = json.dumps(hh).encode()
        cases.append((name, (len(hb), hb + body[hl:])))
    for name, shape in (("a negative shape", [1, -5]), ("a shape overflowing", [1 << 40, 1 << 40])):
        hh = json.loads(body[:hl])
        hh["inputs"][0]["shape"] = shape
        hb = json.dumps(hh).encode()
        cases.append((name, (len(hb), hb + body[hl:])))
    for name, raw in cases:
        st, msg, _ = c.infer(model, None, raw=raw)
        check(st == 400 and msg, "%s: 400 (%s %s)" % (name, st, str(msg)[:100]))
    check(alive(srv), "the server answers after them")


def strict_inputs(srv, model):
    section("NaN/Inf, empty and oversized audio, the KServe inputs (defect 7)")
    c = Client(srv)
    x = f32(audio[names[0]])
    for bad, word in ((float("nan"), "NaN"), (float("inf"), "infinite"),
                      (-float("inf"), "infinite")):
        y = list(x)
        y[1234] = bad
        st, msg, _ = c.infer(model, [("WAV", "FP32", (1, len(y)),
                                      struct.pack("<%df" % len(y), *y))])
        check(st == 400 and word in str(msg) and "1234" in str(msg),
              "a %s sample: 400 naming it (%s %s)" % (bad, st, str(msg)[:100]))
    # empty audio: 400 with a clear message, not 200 with ""
    for name, inputs in (("WAV [1, 0]", [("WAV", "FP32", (1, 0), b"")]),
                         ("WAV_LENS 0", [("WAV", "FP32", (1, 4), b"\0" * 16),
                                         ("WAV_LENS", "INT32", (1, 1), struct.pack("<i", 0))]),
                         ("AUDIO of a WAV with no samples", audio_inputs([wav_bytes([])]))):
        st, msg, _ = c.infer(model, inputs)
        check(st == 400 and "no samples" in str(msg), "empty audio, %s: 400 (%s %s)" %
              (name, st, str(msg)[:120]))
    st, msg, _ = c.infer(model, audio_inputs([b""]))
    check(st == 400 and "empty" in str(msg), "AUDIO of 0 bytes: 400 (%s %s)" % (st, str(msg)[:120]))
    r = requests.post(srv.base + "/v1/audio/transcriptions", data={"model": model},
                      files={"file": ("e.wav", wav_bytes([]), "audio/wav")})
    check(r.status_code == 400 and "no samples" in r.text,
          "OpenAI transcription of a WAV with no samples: 400 (%s %s)" %
          (r.status_code, r.text[:120]))
    # over --max-audio-seconds (30 here): 413, as samples or as a file
    long_pcm = [0] * (16000 * 31)
    st, msg, _ = c.infer(model, audio_inputs([wav_bytes(long_pcm)]))
    check(st == 413,
          "31 s of AUDIO over --max-audio-seconds 30: 413 (%s %s)" % (st, str(msg)[:120]))
    st, msg, _ = c.infer(model, [("WAV", "FP32", (1, len(long_pcm)), b"\0" * 4 * len(long_pcm))])
    check(st == 413, "31 s of WAV samples: 413 (%s %s)" % (st, str(msg)[:120]))
    # unknown extra inputs, AUDIO with WAV, WAV_LENS with AUDIO: 400 naming the input
    wav = wav_inputs(names[:1])
    extra = ("SPEAKER", "INT32", (1, 1), struct.pack("<i", 7))
    for name, inputs, word in (
            ("an unknown extra input beside WAV", wav + [extra], "'SPEAKER'"),
            ("an unknown extra input beside AUDIO",
             audio_inputs([wav_files[names[0]]]) + [extra], "'SPEAKER'"),
            ("AUDIO and WAV together", wav[:1] + audio_inputs([wav_files[names[0]]]), "'AUDIO'"),
            ("WAV_LENS with AUDIO", audio_inputs([wav_files[names[0]]]) + wav[1:], "'WAV_LENS'")):
        st, msg, _ = c.infer(model, inputs)
        check(st == 400 and word in str(msg),
              "%s: 400 naming it (%s %s)" % (name, st, str(msg)[:140]))
    # beam_size out of range: one wording (as config.pbtxt's), over HTTP
    for v in (0, 101, -5):
        st, msg, _ = c.infer(model, wav, params={"beam_size": v})
        check(st == 400 and "beam_size must be in [1, 100] (got %d)" % v in str(msg),
              "beam_size %d: 400 in the one wording (%s %s)" % (v, st, str(msg)[:120]))
    st, texts, _ = c.infer(model, wav)
    check(st == 200 and texts == [ref_text[names[0]]], "a plain request still works (%s)" % st)


def grpc_inputs(srv, model):
    """the same refusals over gRPC, in the same words (INVALID_ARGUMENT)"""
    section("the KServe inputs over gRPC")
    try:
        import grpc
        from grpc_tools import protoc
    except ImportError:
        print("skip: no python3-grpcio / python3-grpc-tools")
        return
    gen = os.path.join(tmp, "gen")
    os.makedirs(gen, exist_ok=True)
    assert protoc.main(["protoc", "-Iproto", "--python_out=" + gen, "--grpc_python_out=" + gen,
                        "proto/grpc_service.proto", "proto/model_config.proto"]) == 0
    sys.path.insert(0, gen)
    import grpc_service_pb2 as pb
    import grpc_service_pb2_grpc as pbg
    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % srv.grpc_port))

    def call(inputs, params=None):
        q = pb.ModelInferRequest(model_name=model)
        for name, dt, shape, raw in inputs:
            t = q.inputs.add()
            t.name, t.datatype = name, dt
            t.shape.extend(shape)
            q.raw_input_contents.append(raw)
        q.outputs.add().name = "TRANSCRIPTS"
        for k, v in (params or {}).items():
            q.parameters[k].int64_param = v
        try:
            r = stub.ModelInfer(q, timeout=60)
            return grpc.StatusCode.OK, texts_of(r.raw_output_contents[0])
        except grpc.RpcError as e:
            return e.code(), e.details() or ""

    wav = wav_inputs(names[:1])
    code, got = call(wav)
    check(code == grpc.StatusCode.OK and got == [ref_text[names[0]]],
          "gRPC: a plain request (%s)" % code)
    bad = grpc.StatusCode.INVALID_ARGUMENT
    for v in (0, 101):
        code, msg = call(wav, {"beam_size": v})
        check(code == bad and "beam_size must be in [1, 100] (got %d)" % v in msg,
              "gRPC beam_size %d: INVALID_ARGUMENT in the one wording (%s %s)" %
              (v, code, msg[:100]))
    for name, inputs, word in (
            ("an unknown extra input", wav + [("SPEAKER", "INT32", (1, 1), struct.pack("<i", 7))],
             "unknown input 'SPEAKER'"),
            ("AUDIO and WAV together", wav[:1] + audio_inputs([wav_files[names[0]]]), "'AUDIO'"),
            ("empty audio", [("WAV", "FP32", (1, 0), b"")], "no samples")):
        code, msg = call(inputs)
        check(code == bad and word in msg,
              "gRPC %s: INVALID_ARGUMENT (%s %s)" % (name, code, msg[:100]))


def corrupt_files(srv, model):
    section("corrupt WAV/FLAC/MP3 headers")
    c = Client(srv)
    good = wav_files[names[0]]
    riff = bytearray(good)
    zero_ch = bytearray(good)
    struct.pack_into("<H", zero_ch, 22, 0)  # channels 0
    zero_rate = bytearray(good)
    struct.pack_into("<I", zero_rate, 24, 0)  # sample rate 0
    huge_rate = bytearray(good)
    struct.pack_into("<I", huge_rate, 24, 0xFFFFFFFF)
    bits = bytearray(good)
    struct.pack_into("<H", bits, 34, 0)  # 0 bits per sample
    fmt_big = bytearray(good)
    struct.pack_into("<I", fmt_big, 16, 0x7FFFFFF0)  # the fmt chunk claims 2 GB
    del riff[8:12]
    cases = [("RIFF then garbage", b"RIFF\x10\0\0\0WAVEjunkjunkjunk"), ("no WAVE tag", bytes(riff)),
             ("0 channels", bytes(zero_ch)), ("sample rate 0", bytes(zero_rate)),
             ("sample rate 2^32-1", bytes(huge_rate)), ("0 bits per sample", bytes(bits)),
             ("a 2 GB fmt chunk", bytes(fmt_big)), ("a WAV header alone", good[:30]),
             ("FLAC magic then garbage", b"fLaC" + bytes(range(256)) * 4),
             ("FLAC STREAMINFO of zeros",
              b"fLaC\x80\0\0\x22" + b"\0" * 34 + b"\xff\xf8" + b"\0" * 64),
             ("an ID3 tag claiming 256 MB", b"ID3\x04\0\0\x7f\x7f\x7f\x7f" + b"\0" * 200),
             ("MP3 frame syncs then garbage", (b"\xff\xfb\x90\x64" + bytes(range(200))) * 20),
             ("an MP3 frame of a bad layer", b"\xff\xf9\xff\xff" * 500),
             ("random bytes", bytes((i * 7919) & 0xFF for i in range(5000)))]
    bad = []
    for name, data in cases:
        st, msg, _ = c.infer(model, audio_inputs([data]))
        if not (st == 400 and msg):
            bad.append((name, st, str(msg)[:80]))
    check(not bad, "%d corrupt files as AUDIO: 400 with a message each (%r)" % (len(cases), bad))
    bad = []
    for name, data in cases[:6] + cases[8:]:
        r = requests.post(srv.base + "/v1/audio/transcriptions", data={"model": model},
                          files={"file": ("x.bin", data, "application/octet-stream")})
        if r.status_code != 400:
            bad.append((name, r.status_code))
    check(not bad, "and as OpenAI files: 400 (%r)" % bad)
    check(alive(srv), "the server answers after them")


def load_unload_under_traffic(srv, model, other):
    section("%d load/unload cycles under traffic" % SIZE["cycles"])
    stop = threading.Event()
    res_main, res_other = [], []

    def traffic(m, out):
        c = Client(srv)
        i = 0
        while not stop.is_set():
            u = names[i % len(names)]
            st, texts, _ = c.infer(m, wav_inputs([u]))
            out.append((st, texts == [ref_text[u]] if st == 200 else texts))
            i += 1

    ts = [threading.Thread(target=traffic, args=(model, res_main)),
          threading.Thread(target=traffic, args=(other, res_other))]
    for t in ts:
        t.start()
    codes = []
    for i in range(SIZE["cycles"]):
        codes.append(requests.post("%s/v2/repository/models/%s/unload" %
                                   (srv.base, other)).status_code)
        codes.append(requests.post("%s/v2/repository/models/%s/load" %
                                   (srv.base, other)).status_code)
    stop.set()
    for t in ts:
        t.join()
    check(codes == [200] * len(codes), "%d unloads and loads: all 200 (%r)" %
          (SIZE["cycles"], sorted(set(codes))))
    check(res_main and all(st == 200 and ok is True for st, ok in res_main),
          "the other model meanwhile: %d requests, all 200 and right" % len(res_main))
    odd = [(st, str(x)[:80]) for st, x in res_other
           if not ((st == 200 and x is True) or st in (400, 404, 503))]
    check(not odd, "the cycled model: %d requests, each right or a clean refusal (%r)" %
          (len(res_other), odd[:3]))
    check(requests.get("%s/v2/models/%s/ready" % (srv.base, other)).status_code == 200,
          "it ends READY")


def overload(srv, model):
    section("overload beyond the queue")

    def one(i):
        us = [names[(i + k) % len(names)] for k in range(4)]
        st, texts, hd = Client(srv).infer(model, wav_inputs(us))
        return st, (texts == [ref_text[u] for u in us]) if st == 200 else str(texts), \
            hd.get("Retry-After") if hd else None

    with cf.ThreadPoolExecutor(32) as ex:
        res = list(ex.map(one, range(32)))
    n503 = [r for r in res if r[0] in (503, 429)]
    ok = [r for r in res if r[0] == 200 and r[1] is True]
    check(len(n503) + len(ok) == len(res), "32 concurrent 4-item requests: each answered right or "
          "refused (%r)" % [r[:2] for r in res if r not in ok and r not in n503][:3])
    check(n503 and all(r[2] for r in n503),
          "beyond max_queue_size 2: %d refused with 503/429 + Retry-After, %d served" %
          (len(n503), len(ok)))


def soak(srv, model):
    section("a %d s soak" % SIZE["soak_s"])
    c = Client(srv)
    ins = {u: wav_inputs([u]) for u in names}
    ref = {}
    for u in names:  # the reference run (and the warm-up)
        st, texts, _ = c.infer(model, ins[u])
        ref[u] = texts if st == 200 else None
    check(all(ref[u] == [ref_text[u]] for u in names), "the reference run")
    for u in names:
        c.infer(model, ins[u])
    rss0 = rss_mb(srv.proc.pid)
    t0, n, diff, rss = time.time(), 0, 0, [rss0]
    while time.time() - t0 < SIZE["soak_s"]:
        with cf.ThreadPoolExecutor(4) as ex:
            out = list(ex.map(lambda u: (u, Client(srv).infer(model, ins[u])), names * 2))
        for u, (st, texts, _) in out:
            n += 1
            diff += st != 200 or texts != ref[u]
        rss.append(rss_mb(srv.proc.pid))
    check(n > 0 and diff == 0, "%d soak requests, outputs identical to the reference run (%d "
          "differ)" % (n, diff))
    # flat: the second half grows no more than noise over the first (allocator arenas settle)
    half = rss[len(rss) // 2]
    check_rss(rss[-1] - half < 32 and rss[-1] - rss0 < 96,
              "RSS flat: %.0f MB at start, %.0f at half time, %.0f at the end" %
              (rss0, half, rss[-1]))


# ---- other servers -----------------------------------------------------------------------------

def bad_repositories(tmp):
    section("bad model repositories")
    repo = os.path.join(tmp, "badrepo")
    os.makedirs(repo)
    add_model(repo, "good")

    def param(key, val):
        def f(t):
            t = re.sub(r'parameters \{ key: "%s"[^\n]*\n' % key, "", t)
            return t + 'parameters { key: "%s" value { string_value: "%s" } }\n' % (key, val)
        return f

    bad = {
        "badbeam": (param("beam_size", "-5"), "beam_size"),
        "badmethod": (param("decoding_method", "magic_search"), "magic_search"),
        "badctc": (param("ctc_weight", "lots"), "ctc_weight"),
        "badinput": (lambda t: t.replace('name: "WAV"', 'name: "SPEECH"'), "SPEECH"),
        "badtype": (lambda t: t.replace("TYPE_FP32", "TYPE_INT8"), "INT8"),
        "badcount": (lambda t: t.replace("count: 1", "count: 0"), "count"),
        "badname": (lambda t: t.replace('name: "badname"', 'name: "other"'), "other"),
        "badbatch": (lambda t: t.replace("max_batch_size: 32", "max_batch_size: -3"),
                     "max_batch_size"),
        "badfamily": (param("family", "no_such_family"), "no_such_family"),
        "badsyntax": (lambda t: t + "\ninput [ { name: \n", "config.pbtxt"),
    }
    for name, (edit, _) in bad.items():
        add_model(repo, name, edit)
    os.makedirs(os.path.join(repo, "nocfg", "1"))
    shutil.copy(os.path.join(DEMO, "1", "model.json"), os.path.join(repo, "nocfg", "1"))
    bad["nocfg"] = (None, "config.pbtxt")
    d = add_model(repo, "noversion")
    shutil.rmtree(os.path.join(d, "1"))
    bad["noversion"] = (None, "version")
    d = add_model(repo, "badweights")
    open(os.path.join(d, "1", "model.safetensors"), "wb").write(b"\xff" * 1000)
    bad["badweights"] = (None, "safetensors")
    open(os.path.join(repo, "binaryjunk"), "w").close()  # a file, not a folder: not a model
    srv = Server(hark, repo, args=["--exit-on-error", "false", "--strict-readiness", "false"])
    try:
        srv.wait_ready(120)
        wait_for(lambda: all(e.get("state") != "LOADING" for e in index(srv).values()))
        idx = index(srv)
        check(idx.get("good", {}).get("state") == "READY", "the good model is READY beside them")
        wrong = {}
        for name, (_, word) in bad.items():
            e = idx.get(name, {})
            reason = e.get("reason", "").lower()
            if not (e.get("state") == "UNAVAILABLE" and word.lower() in reason):
                wrong[name] = (e.get("state"), e.get("reason", "")[:100])
        check(not wrong, "%d bad models: each UNAVAILABLE with a reason naming what is wrong "
              "(%r)" % (len(bad), wrong))
        st, texts, _ = Client(srv).infer("good", wav_inputs(names[:1]))
        check(st == 200 and texts == [ref_text[names[0]]], "the good one serves (%s)" % st)
        st, msg, _ = Client(srv).infer("badbeam", wav_inputs(names[:1]))
        check(st in (400, 503) and "not ready" in str(msg),
              "a request to a bad one: refused as not ready (%s %s)" % (st, str(msg)[:80]))
    finally:
        code = srv.stop()
    check(code == 0, "exit 0 (%s)" % code)


def sigterm_in_flight(tmp):
    section("SIGTERM with %d requests in flight" % SIZE["inflight"])
    repo = os.path.join(tmp, "termrepo")
    os.makedirs(repo)
    # requests wait in the batcher (a long queue delay) until the drain makes it run them
    add_model(repo, "held", batching="  preferred_batch_size: [ 32 ]\n"
              "  max_queue_delay_microseconds: 600000000")
    srv = Server(hark, repo, metrics=True, args=["--drain-timeout-ms", "60000"])
    res = []
    try:
        srv.wait_ready(120)
        N = SIZE["inflight"]
        ts = []
        for i in range(N):
            u = names[i % len(names)]
            t = threading.Thread(target=lambda u=u: res.append(
                (u,) + Client(srv).infer("held", wav_inputs([u]))[:2]))
            t.start()
            ts.append(t)
        ok = wait_for(lambda: pending(srv, "held") == N, 60)
        check(ok, "%d requests pending in the batcher (%s)" % (N, pending(srv, "held")))
        srv.proc.send_signal(signal.SIGTERM)
        for t in ts:
            t.join(120)
        code = srv.proc.wait(120)
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
    good = [r for r in res if r[1] == 200 and r[2] == [ref_text[r[0]]]]
    check(len(good) == SIZE["inflight"], "SIGTERM: all %d answered 200 with their transcripts "
          "(%d; %r)" % (SIZE["inflight"], len(good), [r[1:] for r in res if r not in good][:3]))
    check(code == 0, "and exit 0 (%s)" % code)

    # more work than the drain deadline allows: what is not finished by then is told 503
    srv = Server(hark, repo, metrics=True, args=["--drain-timeout-ms", "300", "--cpu-threads", "1"])
    res = []
    try:
        srv.wait_ready(120)
        ts = []
        for i in range(16):
            us = [names[(i + k) % len(names)] for k in range(8)]
            t = threading.Thread(target=lambda us=us: res.append(
                (us,) + Client(srv).infer("held", wav_inputs(us))[:2]))
            t.start()
            ts.append(t)
        # (pending counts requests; a batch of 32 items, 4 requests, runs at once, the other 12
        # wait behind it on the one instance)
        check(wait_for(lambda: (pending(srv, "held") or 0) >= 12, 60),
              "16 requests of 8 items sent, 12 of them queued")
        srv.proc.send_signal(signal.SIGTERM)
        for t in ts:
            t.join(120)
        code = srv.proc.wait(120)
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
    ok = [r for r in res if r[1] == 200 and r[2] == [ref_text[u] for u in r[0]]]
    late = [r for r in res if r[1] == 503 and "drain deadline" in str(r[2])]
    check(len(ok) + len(late) == 16 and late, "--drain-timeout-ms 300: every request answered, %d "
          "right, %d told 503 at the deadline (%r)" %
          (len(ok), len(late), [r[1:] for r in res if r not in ok and r not in late][:2]))
    check(code == 0, "and exit 0 (%s)" % code)


SECTIONS = [("malformed", malformed), ("headers", big_headers), ("slowloris", slowloris),
            ("pipelining", lambda s: pipelining(s, "demo")),
            ("resets", lambda s: resets(s, "demo")),
            ("idle", idle_connections), ("keepalive", lambda s: keepalive_storm(s, "demo")),
            ("sizes", lambda s: lying_sizes(s, "demo")),
            ("inputs", lambda s: strict_inputs(s, "demo")),
            ("grpc", lambda s: grpc_inputs(s, "demo")),
            ("files", lambda s: corrupt_files(s, "demo")),
            ("cycles", lambda s: load_unload_under_traffic(s, "demo", "demo_b")),
            ("overload", lambda s: overload(s, "demo_q")), ("soak", lambda s: soak(s, "demo"))]
# and, each on a server of its own: "repositories", "sigterm"

# ---- main --------------------------------------------------------------------------------------

tmp = os.path.realpath(tempfile.mkdtemp(prefix="hark-battery-"))
ref_text = {}
try:
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    add_model(repo, "demo")
    add_model(repo, "demo_b")
    add_model(repo, "demo_q", batching="  max_queue_delay_microseconds: 2000\n"
              "  default_queue_policy { max_queue_size: 2 }")
    srv = Server(hark, repo, metrics=True, grpc=True,
                 args=["--model-control-mode", "explicit", "--load-model", "*",
                       "--max-connections", str(SIZE["idle"] - 50), "--request-timeout-ms", "2000",
                       "--max-audio-seconds", "30", "--max-body-bytes", "16000000"])
    try:
        srv.wait_ready(120)
        c = Client(srv)
        for u in names:  # what the demo model says for each (the references of every section)
            st, texts, _ = c.infer("demo", wav_inputs([u]))
            ref_text[u] = texts[0] if st == 200 else None
        check(all(ref_text.values()), "the demo model transcribes the five examples")
        for name, fn in SECTIONS:
            if ONLY and name not in ONLY:
                continue
            try:
                fn(srv)
            except Exception as e:  # a section that breaks is a failure, the others still run
                import traceback
                traceback.print_exc()
                check(False, "section raised %s: %s" % (type(e).__name__, e))
            if srv.proc.poll() is not None:
                check(False, "the server died (status %s); log tail:\n%s" %
                      (srv.proc.returncode, "".join(srv.log[-20:])))
                break
    finally:
        code = srv.stop(60)
    check(code == 0, "the main server: exit 0 on SIGTERM (%s)" % code)
    if not ONLY or "repositories" in ONLY:
        bad_repositories(tmp)
    if not ONLY or "sigterm" in ONLY:
        sigterm_in_flight(tmp)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
print("battery: %.1f s" % (time.time() - T0))
check.exit()
