"""What the server integration scripts share: a `hark serve` started on loopback with ephemeral
ports (its log collected), the ok/FAIL checks, and the exit. Imported by tests/server/test_*.py
(they run from the repository root with this folder on sys.path)."""
import re, subprocess, sys, threading


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
