#!/usr/bin/env python3
"""Model control and API restriction (issue 23: Security, defect 4), with copies of the bundled
demo recogniser (models/demo-en-asr): Triton's --model-control-mode none (the default: the
repository load/unload API refused with Triton's UNAVAILABLE), explicit (--load-model loads only
that model; load/unload work) and poll (a model copied into the repository is loaded, a changed
one reloaded, a removed one dropped); --http-restricted-api / --grpc-restricted-protocol (403 /
UNAVAILABLE without the header, served with it); model names that would leave the repository
(`..`, `/`, control characters) refused with 400 / INVALID_ARGUMENT, and no client-visible error
naming the repository's absolute path.
Usage: test_model_control.py HARK_BIN. Run from the repository root. Exit 0 = pass."""
import http.client, json, os, re, shutil, subprocess, sys, tempfile, time

import grpc
import requests
from grpc_tools import protoc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Server  # noqa: E402

hark = sys.argv[1]
DEMO = "models/demo-en-asr"
EX = "examples/demo-en"
tmp = os.path.realpath(tempfile.mkdtemp(prefix="hark-ctl-"))
gen = os.path.join(tmp, "gen")
os.makedirs(gen)
assert protoc.main(["protoc", "-Iproto", "--python_out=" + gen, "--grpc_python_out=" + gen,
                    "proto/grpc_service.proto", "proto/model_config.proto"]) == 0, "protoc failed"
sys.path.insert(0, gen)
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pbg  # noqa: E402

refs = dict(l.rstrip("\n").split(" ", 1) for l in open(os.path.join(EX, "trans.txt")))
KEY = sorted(refs)[0]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def add_model(repo, name, batch=32):
    """a copy of the demo recogniser called name (its config's name and max_batch_size set)"""
    d = os.path.join(repo, name)
    shutil.copytree(DEMO, d, ignore=shutil.ignore_patterns("README.md"))
    cfg = os.path.join(d, "config.pbtxt")
    txt = open(cfg).read()
    txt = re.sub(r'name: "[^"]*"', 'name: "%s"' % name, txt, count=1)
    txt = re.sub(r"max_batch_size: \d+", "max_batch_size: %d" % batch, txt)
    txt = re.sub(r"preferred_batch_size: \[[^\]]*\]", "preferred_batch_size: [ %d ]" % batch, txt)
    open(cfg, "w").write(txt)
    return d


def raw_post(port, path, headers=None):
    """POST path exactly as written (requests/urllib3 would fold '..' segments away)"""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=b"", headers=headers or {})
    r = c.getresponse()
    body = r.read().decode("utf-8", "replace")
    c.close()
    return r.status, body


def code_of(fn):
    try:
        fn()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def index(srv, headers=None):
    return {e["name"]: e for e in requests.post(srv.base + "/v2/repository/index",
                                                headers=headers).json()}


def wait_for(cond, what, secs=60):
    """polls cond() until true (no fixed sleeps); False after secs"""
    t0 = time.time()
    while time.time() - t0 < secs:
        try:
            if cond():
                return True
        except (requests.RequestException, ValueError, KeyError):
            pass
        time.sleep(0.2)
    print("     (waited %d s for %s)" % (secs, what))
    return False


def transcribe(srv, model, headers=None):
    with open(os.path.join(EX, KEY + ".wav"), "rb") as f:
        return requests.post(srv.base + "/v1/audio/transcriptions",
                             files={"file": (KEY + ".wav", f, "audio/wav")},
                             data={"model": model}, headers=headers)


def no_path(text):
    return tmp not in text and "/tmp/" not in text


REFUSED = "explicit model load / unload is not allowed if polling is enabled"

# ---- none (the default): everything loaded, the load/unload API refused as Triton refuses it --
repo = os.path.join(tmp, "none")
os.makedirs(repo)
add_model(repo, "asr_a")
add_model(repo, "asr_b")
srv = Server(hark, repo, grpc=True)
try:
    srv.wait_ready(120)
    idx = index(srv)
    check(idx.get("asr_a", {}).get("state") == "READY" and
          idx.get("asr_b", {}).get("state") == "READY", "none: every model loaded at start-up")
    for act in ("unload", "load"):
        r = requests.post(srv.base + "/v2/repository/models/asr_a/" + act)
        check(r.status_code == 503 and REFUSED in r.json().get("error", ""),
              "none: HTTP %s refused, 503 with Triton's message (%s %s)" % (act, r.status_code,
                                                                             r.text[:120]))
    s = pbg.GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % srv.grpc_port))
    c, d = code_of(lambda: s.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(
        model_name="asr_a")))
    check(c == grpc.StatusCode.UNAVAILABLE and REFUSED in d,
          "none: gRPC RepositoryModelUnload UNAVAILABLE (%s %s)" % (c, d))
    check(requests.get(srv.base + "/v2/models/asr_a/ready").status_code == 200,
          "none: the model is still loaded")
finally:
    srv.stop()

# ---- explicit, with restricted APIs over HTTP and gRPC ---------------------------------------
repo = os.path.join(tmp, "explicit")
os.makedirs(repo)
add_model(repo, "asr_a")
add_model(repo, "asr_b")
broken = add_model(repo, "broken")
shutil.rmtree(os.path.join(broken, "1"))  # no version folder: its load fails naming a path
ADMIN, INFER = {"admin-key": "admin-value"}, {"infer-key": "infer-value"}
GADMIN = (("triton-grpc-protocol-admin-key", "admin-value"),)
GINFER = (("triton-grpc-protocol-infer-key", "infer-value"),)
srv = Server(hark, repo, grpc=True, args=[
    "--model-control-mode", "explicit", "--load-model", "asr_a",
    "--http-restricted-api", "model-repository,model-config,statistics:admin-key=admin-value",
    "--http-restricted-api", "inference,metadata:infer-key=infer-value",
    "--grpc-restricted-protocol", "model-repository:admin-key=admin-value",
    "--grpc-restricted-api", "inference,health:infer-key=infer-value"])
try:
    srv.wait_ready(120)  # health is open over HTTP
    # restricted HTTP APIs: 403 with Triton's message without the header (or with a wrong value)
    r = requests.post(srv.base + "/v2/repository/index")
    check(r.status_code == 403 and
          r.json().get("error") == "This API is restricted, expecting header 'admin-key'",
          "restricted index without the header: 403 (%s %s)" % (r.status_code, r.text[:100]))
    r = requests.post(srv.base + "/v2/repository/index", headers={"admin-key": "wrong"})
    check(r.status_code == 403, "restricted index with a wrong value: 403")
    idx = index(srv, ADMIN)
    check(idx.get("asr_a", {}).get("state") == "READY" and
          idx.get("asr_b", {}).get("state") != "READY" and "broken" in idx,
          "explicit: only the --load-model model loaded at start-up (%s)" %
          {k: v.get("state") for k, v in idx.items()})
    for path, hdr, what in (("/v2/models/asr_a/config", ADMIN, "model-config"),
                            ("/v2/models/asr_a/stats", ADMIN, "statistics"),
                            ("/v2/models/asr_a", INFER, "metadata (model)"),
                            ("/v2", INFER, "metadata (server)"),
                            ("/v1/models", INFER, "metadata (OpenAI's model list)")):
        a = requests.get(srv.base + path)
        b = requests.get(srv.base + path, headers=hdr)
        check(a.status_code == 403 and b.status_code == 200,
              "%s: 403 without the header, 200 with it (%s, %s)" % (what, a.status_code,
                                                                   b.status_code))
    check(requests.get(srv.base + "/v2/models/asr_a/ready").status_code == 200,
          "health is not restricted over HTTP")
    r = transcribe(srv, "asr_a")
    check(r.status_code == 403, "inference (OpenAI endpoint) without the header: 403")
    r = transcribe(srv, "asr_a", INFER)
    check(r.status_code == 200 and r.json().get("text") == refs[KEY],
          "inference with the header: the example's text (%s)" % r.text[:120])
    # explicit load / unload (with the admin header)
    r = requests.post(srv.base + "/v2/repository/models/asr_b/load")
    check(r.status_code == 403, "load without the header: 403")
    r = requests.post(srv.base + "/v2/repository/models/asr_b/load", headers=ADMIN)
    check(r.status_code == 200 and
          requests.get(srv.base + "/v2/models/asr_b/ready").status_code == 200,
          "explicit: load (%s %s)" % (r.status_code, r.text[:120]))
    r = requests.post(srv.base + "/v2/repository/models/asr_a/unload", headers=ADMIN)
    check(r.status_code == 200 and
          requests.get(srv.base + "/v2/models/asr_a/ready").status_code == 400,
          "explicit: unload (%s %s)" % (r.status_code, r.text[:120]))
    # names that would leave the repository: 400, and no absolute path in any answer
    for path in ("/v2/repository/models/../load", "/v2/repository/models/../unload",
                 "/v2/repository/models/.hidden/load", "/v2/repository/models/x%2F..%2F/load"):
        st, body = raw_post(srv.port, path, ADMIN)
        want = 404 if "%2F" in path else 400  # (not decoded: a name no folder has)
        check(st == want and no_path(body) and (want == 404 or "invalid model name" in body),
              "POST %s: %d without a path (%s %s)" % (path, want, st, body[:150]))
    st, body = raw_post(srv.port, "/v2/repository/models/nope/load", ADMIN)
    check(st == 404 and "not found in the model repository" in body and no_path(body),
          "unknown model: 404 without the repository's path (%s)" % body[:150])
    st, body = raw_post(srv.port, "/v2/repository/models/broken/load", ADMIN)
    check(st != 200 and "broken" in body and no_path(body),
          "a failed load names the folder within the repository, not its path (%s %s)" %
          (st, body[:200]))
    idx = index(srv, ADMIN)
    check(idx["broken"]["state"] == "UNAVAILABLE" and idx["broken"]["reason"] and
          no_path(json.dumps(idx)),
          "the index's reason has no absolute path (%r)" % idx["broken"]["reason"][:150])
    check(any(tmp in l for l in srv.log), "the server's log keeps the path")
    # gRPC: restricted protocols answer UNAVAILABLE without the metadata
    s = pbg.GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % srv.grpc_port))
    c, d = code_of(lambda: s.RepositoryIndex(pb.RepositoryIndexRequest()))
    check(c == grpc.StatusCode.UNAVAILABLE and
          d == "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'",
          "gRPC RepositoryIndex without the metadata: UNAVAILABLE (%s %s)" % (c, d))
    c, d = code_of(lambda: s.ServerLive(pb.ServerLiveRequest()))
    check(c == grpc.StatusCode.UNAVAILABLE, "gRPC ServerLive (health) without the metadata (%s)" % c)
    check(s.ServerLive(pb.ServerLiveRequest(), metadata=GINFER).live,
          "gRPC ServerLive with the metadata")
    check(s.ServerMetadata(pb.ServerMetadataRequest()).name == "hark",
          "gRPC metadata is not restricted")
    names = [m.name for m in s.RepositoryIndex(pb.RepositoryIndexRequest(), metadata=GADMIN).models]
    check("asr_b" in names, "gRPC RepositoryIndex with the metadata")
    c, d = code_of(lambda: s.RepositoryModelUnload(
        pb.RepositoryModelUnloadRequest(model_name="asr_b"), metadata=GADMIN))
    check(c == grpc.StatusCode.OK and
          not s.ModelReady(pb.ModelReadyRequest(name="asr_b"), metadata=GINFER).ready,
          "gRPC RepositoryModelUnload in explicit mode (%s %s)" % (c, d))
    c, d = code_of(lambda: s.RepositoryModelLoad(
        pb.RepositoryModelLoadRequest(model_name="asr_b"), metadata=GADMIN))
    check(c == grpc.StatusCode.OK and
          s.ModelReady(pb.ModelReadyRequest(name="asr_b"), metadata=GINFER).ready,
          "gRPC RepositoryModelLoad in explicit mode (%s %s)" % (c, d))
    for bad in ("../asr_a", "asr_a/1", "/etc", "..", "a\x01b", ""):
        c, d = code_of(lambda: s.RepositoryModelLoad(
            pb.RepositoryModelLoadRequest(model_name=bad), metadata=GADMIN))
        check(c == grpc.StatusCode.INVALID_ARGUMENT and no_path(d),
              "gRPC load of %r: INVALID_ARGUMENT without a path (%s %s)" % (bad, c, d))
finally:
    srv.stop()

# ---- poll: a model copied in is loaded, a changed one reloaded, a removed one dropped --------
repo = os.path.join(tmp, "poll")
os.makedirs(repo)
add_model(repo, "asr_a")
srv = Server(hark, repo, args=["--model-control-mode", "poll", "--repository-poll-secs", "1"])
try:
    srv.wait_ready(120)
    r = requests.post(srv.base + "/v2/repository/models/asr_a/unload")
    check(r.status_code == 503 and REFUSED in r.text, "poll: the unload API refused (%s %s)" %
          (r.status_code, r.text[:100]))
    staged = add_model(tmp, "asr_b", batch=16)  # made beside, then moved in whole
    os.rename(staged, os.path.join(repo, "asr_b"))
    check(wait_for(lambda: index(srv).get("asr_b", {}).get("state") == "READY",
                   "asr_b READY"), "poll: a model copied into the repository is loaded")
    check(requests.get(srv.base + "/v2/models/asr_b/config").json().get("max_batch_size") == 16,
          "poll: the new model's config served")
    cfg = os.path.join(repo, "asr_b", "config.pbtxt")
    txt = re.sub(r"max_batch_size: \d+", "max_batch_size: 8", open(cfg).read())
    open(cfg, "w").write(txt.replace("[ 16 ]", "[ 8 ]"))  # (in place: the poll may see it half)
    check(wait_for(lambda: requests.get(srv.base + "/v2/models/asr_b/config").json()
                   .get("max_batch_size") == 8, "asr_b reloaded"),
          "poll: a changed model is reloaded")
    shutil.rmtree(os.path.join(repo, "asr_a"))
    check(wait_for(lambda: "asr_a" not in index(srv), "asr_a gone"),
          "poll: a removed model leaves the index")
    check(requests.get(srv.base + "/v2/models/asr_a/ready").status_code == 404 and
          transcribe(srv, "asr_b").status_code == 200,
          "poll: the removed model is gone, the other one serves")
finally:
    srv.stop()
    if failures:
        print("".join(srv.log[-30:]))

# ---- option errors, as Triton reports them ---------------------------------------------------
for args, want in ((["--load-model", "asr_a"], "requires --model-control-mode explicit"),
                   (["--http-restricted-api", "model-reposit:k=v"],
                    "unknown restricted api 'model-reposit'"),
                   (["--http-restricted-api", "health:k1=v1", "--http-restricted-api",
                     "metadata,health:k2=v2"],
                    "api 'health' can not be specified in multiple config groups"),
                   (["--grpc-restricted-protocol", "health"], "option format"),
                   (["--model-control-mode", "sometimes"], "none|explicit|poll")):
    p = subprocess.run([hark, "serve", "--model-repository", repo, "--http-port", "0",
                        "--grpc-port", "-1", "--metrics-port", "-1"] + args,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    check(p.returncode != 0 and want in p.stdout, "%s: refused (%s)" % (" ".join(args),
                                                                        p.stdout.strip()[-150:]))

shutil.rmtree(tmp, ignore_errors=True)
print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
