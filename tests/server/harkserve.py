"""What the server integration scripts share: a `hark serve` started on loopback with ephemeral
ports (its log collected), the ok/FAIL checks, and the exit. Imported by tests/server/test_*.py
(they run from the repository root with this folder on sys.path)."""
import base64, hashlib, json, os, re, socket, struct, subprocess, sys, threading, time


class Server:
    """hark serve --model-repository REPO on 127.0.0.1, HTTP on an ephemeral port (gRPC and
    metrics too when asked); .base, .port, .grpc_port, .metrics_port, .log (lines), .proc."""

    def __init__(self, hark, repo, grpc=False, metrics=False, args=()):
        """repo None: no --model-repository (the bundled demo models); the lines before the
        startup line are kept in .early"""
        cmd = [hark, "serve"] + (["--model-repository", repo] if repo else []) + [
            "--http-port", "0", "--grpc-port", "0" if grpc else "-1",
            "--metrics-port", "0" if metrics else "-1"]
        self.proc = subprocess.Popen(cmd + list(args), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.early = []
        line = self.proc.stdout.readline()
        while line and not line.startswith("hark serving"):
            self.early.append(line)
            line = self.proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert m, "no startup line: " + "".join(self.early) + line
        self.port = int(m.group(1))
        self.base = "http://127.0.0.1:%d" % self.port
        g = re.search(r"grpc://127\.0\.0\.1:(\d+)", line)
        self.grpc_port = int(g.group(1)) if g else None
        mm = re.search(r"metrics http://127\.0\.0\.1:(\d+)", line)
        self.metrics_port = int(mm.group(1)) if mm else None
        self.log = []
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stdout],
                         daemon=True).start()

    def wait_ready(self, secs=60):
        import requests
        t0 = time.time()
        while requests.get(self.base + "/v2/health/ready").status_code != 200:
            assert time.time() - t0 < secs, "not ready within %d s" % secs
            time.sleep(0.1)

    def infer(self, model, inputs, output, params=None):
        """KServe v2 binary request: inputs [(name, datatype, ndarray)] -> (status, json, blob)."""
        import requests
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
        r = requests.post(f"{self.base}/v2/models/{model}/infer", data=hb + b"".join(blobs),
                          headers={"Inference-Header-Content-Length": str(len(hb)),
                                   "Content-Type": "application/octet-stream"})
        if r.status_code != 200:
            return r.status_code, r.json(), b""
        hl = int(r.headers["Inference-Header-Content-Length"])
        return 200, json.loads(r.content[:hl]), r.content[hl:]

    def stop(self, timeout=20):
        """SIGTERM, then SIGKILL after timeout seconds; the exit status (None when killed)"""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode


def name_models(repo):
    """Triton's rule, which hark follows: config.pbtxt's name is its folder's. Copies of one model
    (name "m") under other folders get their folder's name."""
    for d in os.listdir(repo):
        p = os.path.join(repo, d, "config.pbtxt")
        if os.path.isfile(p):
            txt = open(p).read()
            open(p, "w").write(re.sub(r'name: "[^"]*"', 'name: "%s"' % d, txt, count=1))


def pcm16k(path):
    """a 16-bit mono WAV's samples as 16 kHz int16 values: what a WAV tensor must carry (the
    tensor has no rate; the models read it as 16 kHz). Other rates (the espeak-ng examples are
    22.05 kHz) are resampled band-limited, by truncating or padding the spectrum."""
    import wave
    import numpy as np
    with wave.open(path) as w:
        sr, n = w.getframerate(), w.getnframes()
        x = np.frombuffer(w.readframes(n), dtype="<i2")
    if sr != 16000:
        m = int(round(n * 16000 / sr))
        spec = np.fft.rfft(x.astype(np.float64))
        spec = np.pad(spec[: m // 2 + 1], (0, max(0, m // 2 + 1 - len(spec))))
        x = np.clip(np.round(np.fft.irfft(spec, m) * m / n), -32768, 32767)
    return [int(v) for v in x]


def texts_of(blob):
    """the elements of a binary BYTES tensor, as text"""
    out, o = [], 0
    while o < len(blob):
        k = struct.unpack("<I", blob[o:o + 4])[0]
        out.append(blob[o + 4:o + 4 + k].decode())
        o += 4 + k
    return out


class Checks:
    """ok / FAIL lines; .failures lists the failed ones; .exit() prints the count and exits"""

    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            self.failures.append(what)

    def exit(self):
        print("%d failure(s)" % len(self.failures))
        sys.exit(1 if self.failures else 0)


class WS:
    """a raw-socket RFC 6455 client (masked frames), as WeNet's websocket client speaks to a
    server: text(obj), send(opcode, payload), recv(), messages(until type)"""

    def __init__(self, port, path="/"):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            b = self.s.recv(1)
            if not b:
                break
            head += b
        self.head = head.decode(errors="replace")
        want = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.ok = self.head.startswith("HTTP/1.1 101") and ("Sec-WebSocket-Accept: " + want) in self.head

    def send(self, op, payload):
        n, mask = len(payload), os.urandom(4)
        h = bytes([0x80 | op])
        if n < 126:
            h += bytes([0x80 | n])
        elif n < 65536:
            h += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            h += bytes([0x80 | 127]) + struct.pack(">Q", n)
        k = (mask * (n // 4 + 1))[:n]
        body = (int.from_bytes(payload, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")
        self.s.sendall(h + mask + body)

    def text(self, obj):
        self.send(1, json.dumps(obj).encode())

    def _read(self, n):
        b = b""
        while len(b) < n:
            x = self.s.recv(n - len(b))
            if not x:
                raise EOFError
            b += x
        return b

    def recv(self):
        """(opcode, payload) of the next frame; (None, None) when the connection closed."""
        try:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            return b0 & 0x0F, self._read(n)
        except (EOFError, ConnectionError, socket.timeout):
            return None, None

    def messages(self, until):
        out = []
        while True:
            op, p = self.recv()
            if op is None or op == 8:
                return out, op
            if op == 1:
                out.append(json.loads(p))
                if out[-1].get("type") == until or out[-1].get("status") == "failed":
                    return out, op
