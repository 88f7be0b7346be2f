"""What the server integration scripts share: a `hark serve` started on loopback with ephemeral
ports (its log collected), the ok/FAIL checks, and the exit. Imported by tests/server/test_*.py
(they run from the repository root with this folder on sys.path)."""
import json, re, struct, subprocess, sys, threading, time


class Server:
    """hark serve --model-repository REPO on 127.0.0.1, HTTP on an ephemeral port (gRPC and
    metrics too when asked); .base, .port, .grpc_port, .metrics_port, .log (lines), .proc."""

    def __init__(self, hark, repo, grpc=False, metrics=False, args=()):
        cmd = [hark, "serve", "--model-repository", repo, "--http-port", "0",
               "--grpc-port", "0" if grpc else "-1", "--metrics-port", "0" if metrics else "-1"]
        self.proc = subprocess.Popen(cmd + list(args), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert m, "no startup line: " + line
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
