#!/usr/bin/env python3
"""Integration test of KServe v2 over gRPC (run by tests/server/test_grpc_integration.c): a real
`hark serve` on loopback with the golden WeNet model, driven with grpcio and classes generated at
test time from proto/*.proto. Every RPC; WAV/WAV_LENS in -> TRANSCRIPTS out equal to the HTTP
path's answer; ModelStreamInfer; error codes; graceful drain.
Usage: test_grpc.py HARK_BIN MODEL_DIR GOLDEN_DIR. Exit 0 = pass."""
import json, os, re, shutil, signal, struct, subprocess, sys, tempfile, threading, time, wave
import array

import grpc
import requests
from grpc_tools import protoc

from harkserve import name_models  # noqa: E402 (this folder is on sys.path)

hark, model_dir, golden = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
proto_dir = os.path.join(here, "..", "..", "proto")
tmp = tempfile.mkdtemp(prefix="hark-grpc-")
gen = os.path.join(tmp, "gen")
os.makedirs(gen)
assert protoc.main(["protoc", "-I" + proto_dir, "--python_out=" + gen, "--grpc_python_out=" + gen,
                    os.path.join(proto_dir, "grpc_service.proto"),
                    os.path.join(proto_dir, "model_config.proto")]) == 0, "protoc failed"
sys.path.insert(0, gen)
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pbg  # noqa: E402

R = json.load(open(os.path.join(golden, "results.json")))
repo = os.path.join(tmp, "repo")
os.makedirs(repo)
shutil.copytree(model_dir, os.path.join(repo, "wenet"))
# a copy with a one-request queue: UNAVAILABLE ("Exceeds maximum queue size", as Triton) when full
shutil.copytree(model_dir, os.path.join(repo, "wenet_q1"))
cfg = os.path.join(repo, "wenet_q1", "config.pbtxt")
txt = open(cfg).read()
txt = re.sub(r"max_queue_delay_microseconds: \d+",
             "max_queue_delay_microseconds: 100000\n  default_queue_policy { max_queue_size: 1 }", txt)
open(cfg, "w").write(txt)
MAX_BODY = 8000000
name_models(repo)
proc = subprocess.Popen([hark, "serve", "--model-repository", repo, "--http-port", "0",
                         "--grpc-port", "0", "--metrics-port", "-1", "--max-body-bytes",
                         str(MAX_BODY), "--drain-timeout-ms", "20000",
                         "--model-control-mode", "explicit", "--load-model", "*"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
line = proc.stdout.readline()
m = re.search(r"http://127\.0\.0\.1:(\d+) .*gRPC grpc://127\.0\.0\.1:(\d+)", line)
assert m, "no startup line with the gRPC port: " + line
base, target = f"http://127.0.0.1:{m.group(1)}", f"127.0.0.1:{m.group(2)}"
log = []
threading.Thread(target=lambda: [log.append(l) for l in proc.stdout], daemon=True).start()
failures = []
OPTS = [("grpc.max_send_message_length", 2**31 - 1), ("grpc.max_receive_message_length", 2**31 - 1)]


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def code_of(fn):
    try:
        fn()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def pcm(u):
    raw = open(os.path.join(golden, "wavs", u + ".wav"), "rb").read()
    w = wave.open(os.path.join(golden, "wavs", u + ".wav"))
    n = w.getnframes()
    data = raw[raw.index(b"data") + 8:][:2 * n]
    return [v / 32768.0 for v in struct.unpack("<%dh" % n, data)]


def infer_request(model, xs, rid="", method="ctc_greedy_search", wav_bytes=None, dtype="FP32"):
    N = max(len(x) for x in xs)
    flat = []
    for x in xs:
        flat += x + [0.0] * (N - len(x))
    q = pb.ModelInferRequest(model_name=model, id=rid)
    t = q.inputs.add()
    t.name, t.datatype = "WAV", dtype
    t.shape.extend([len(xs), N])
    t = q.inputs.add()
    t.name, t.datatype = "WAV_LENS", "INT32"
    t.shape.extend([len(xs), 1])
    q.raw_input_contents.append(wav_bytes if wav_bytes is not None else array.array("f", flat).tobytes())
    q.raw_input_contents.append(struct.pack("<%di" % len(xs), *[len(x) for x in xs]))
    q.outputs.add().name = "TRANSCRIPTS"
    if method:
        q.parameters["decoding_method"].string_param = method
    return q


def transcripts(resp):
    i = [o.name for o in resp.outputs].index("TRANSCRIPTS")
    raw, out, pos = resp.raw_output_contents[i], [], 0
    while pos < len(raw):
        n = struct.unpack_from("<I", raw, pos)[0]
        out.append(raw[pos + 4:pos + 4 + n].decode())
        pos += 4 + n
    return out


try:
    ch = grpc.insecure_channel(target, options=OPTS)
    s = pbg.GRPCInferenceServiceStub(ch)
    t0 = time.time()
    while not s.ServerReady(pb.ServerReadyRequest()).ready:
        assert time.time() - t0 < 120, "not ready within 120 s"
        time.sleep(0.1)
    check(s.ServerLive(pb.ServerLiveRequest()).live, "ServerLive")
    check(s.ModelReady(pb.ModelReadyRequest(name="wenet")).ready, "ModelReady")
    check(not s.ModelReady(pb.ModelReadyRequest(name="nope")).ready, "ModelReady: unknown model")
    md = s.ServerMetadata(pb.ServerMetadataRequest())
    check(md.name == "hark" and md.version and "statistics" in md.extensions, "ServerMetadata")
    mm = s.ModelMetadata(pb.ModelMetadataRequest(name="wenet"))
    check(mm.name == "wenet" and mm.inputs[0].name == "WAV" and list(mm.inputs[0].shape) == [-1, -1]
          and mm.outputs[0].name == "TRANSCRIPTS" and mm.outputs[0].datatype == "BYTES",
          "ModelMetadata with the batch dimension")
    check(code_of(lambda: s.ModelMetadata(pb.ModelMetadataRequest(name="nope")))[0] ==
          grpc.StatusCode.NOT_FOUND, "ModelMetadata: NOT_FOUND")
    http_cfg = requests.get(base + "/v2/models/wenet/config").json()
    mc = s.ModelConfig(pb.ModelConfigRequest(name="wenet")).config
    check(mc.max_batch_size == http_cfg["max_batch_size"] == 64 and mc.input[0].name == "WAV" and
          mc.input[0].data_type == 11 and mc.output[0].data_type == 13 and
          mc.WhichOneof("scheduling_choice") == "dynamic_batching" and len(mc.instance_group) >= 1,
          "ModelConfig matches the HTTP config")
    ix = s.RepositoryIndex(pb.RepositoryIndexRequest())
    check(sorted(x.name for x in ix.models) == ["wenet", "wenet_q1"] and
          all(x.state for x in ix.models), "RepositoryIndex")

    # the same batch through HTTP (binary tensors) and gRPC: equal transcripts
    us = ["cards-001", "LJ001-0002", "sense_and_sensibility_01_austen_64kb-0880"]
    xs = [pcm(u) for u in us]
    q = infer_request("wenet", xs, rid="batch-1")
    r = s.ModelInfer(q)
    a = bytes(q.raw_input_contents[0])
    lens = bytes(q.raw_input_contents[1])
    N = max(len(x) for x in xs)
    hdr = json.dumps({"inputs": [
        {"name": "WAV", "shape": [3, N], "datatype": "FP32", "parameters": {"binary_data_size": len(a)}},
        {"name": "WAV_LENS", "shape": [3, 1], "datatype": "INT32", "parameters": {"binary_data_size": 12}}],
        "outputs": [{"name": "TRANSCRIPTS", "parameters": {"binary_data": False}}],
        "parameters": {"decoding_method": "ctc_greedy_search"}}).encode()
    hr = requests.post(base + "/v2/models/wenet/infer", data=hdr + a + lens,
                       headers={"Inference-Header-Content-Length": str(len(hdr))})
    got = transcripts(r)
    check(hr.status_code == 200 and got == hr.json()["outputs"][0]["data"],
          "ModelInfer TRANSCRIPTS equal to the HTTP path's")
    check(got == [R[u]["full"]["ctc_greedy_search"]["text"] for u in us], "ModelInfer = golden greedy")
    check(r.id == "batch-1" and r.model_name == "wenet" and
          len(r.outputs) == len(r.raw_output_contents) == 1 and r.outputs[0].datatype == "BYTES",
          "ModelInfer: id echoed, outputs paired with raw_output_contents")
    # the model's default decoding (attention rescoring), no parameters
    r = s.ModelInfer(infer_request("wenet", xs[:1], method=None))
    check(transcripts(r) == [R[us[0]]["full"]["attention_rescoring"]["text"]],
          "ModelInfer, default decoding = golden attention rescoring")

    # ModelStreamInfer: each request answered on the stream, id echoed, final flag
    reqs = [infer_request("wenet", [xs[i]], rid="s%d" % i) for i in range(3)]
    reqs.insert(1, infer_request("nope", [xs[0]], rid="bad"))
    resp = list(s.ModelStreamInfer(iter(reqs)))
    by_id = {x.infer_response.id: x for x in resp}
    check(len(resp) == 4 and all(by_id["s%d" % i].error_message == "" and
                                 transcripts(by_id["s%d" % i].infer_response) ==
                                 [R[us[i]]["full"]["ctc_greedy_search"]["text"]] for i in range(3)),
          "ModelStreamInfer: three transcripts, ids echoed")
    check(by_id["bad"].error_message != "" and "nope" in by_id["bad"].error_message,
          "ModelStreamInfer: an error answers that request only")
    check(all(by_id["s%d" % i].infer_response.parameters["triton_final_response"].bool_param
              for i in range(3)), "ModelStreamInfer: triton_final_response")

    # errors
    nan = array.array("f", [float("nan")] * 1600).tobytes()
    c, d = code_of(lambda: s.ModelInfer(infer_request("wenet", [[0.0] * 1600], wav_bytes=nan)))
    check(c == grpc.StatusCode.INVALID_ARGUMENT, "NaN audio: INVALID_ARGUMENT (%s)" % d)
    c, d = code_of(lambda: s.ModelInfer(infer_request("wenet", [[0.0] * 1600], wav_bytes=b"\0" * 100)))
    check(c == grpc.StatusCode.INVALID_ARGUMENT and "WAV" in d, "bad shape: INVALID_ARGUMENT (%s)" % d)
    c, d = code_of(lambda: s.ModelInfer(infer_request("wenet", [[0.0] * 1600], dtype="FP33")))
    check(c == grpc.StatusCode.INVALID_ARGUMENT and "FP33" in d, "bad dtype: INVALID_ARGUMENT")
    c, d = code_of(lambda: s.ModelInfer(infer_request("nope", [[0.0] * 1600])))
    check(c == grpc.StatusCode.NOT_FOUND, "unknown model: NOT_FOUND")
    big = infer_request("wenet", [[0.0] * (MAX_BODY // 4 + 1000)])
    c, d = code_of(lambda: s.ModelInfer(big))
    check(c == grpc.StatusCode.RESOURCE_EXHAUSTED, "message over --max-body-bytes: RESOURCE_EXHAUSTED")
    c, d = code_of(lambda: ch.unary_unary("/inference.GRPCInferenceService/Trace")(b""))
    check(c == grpc.StatusCode.UNIMPLEMENTED, "Trace: UNIMPLEMENTED")
    c, d = code_of(lambda: s.ModelInfer(infer_request("wenet", [xs[2]] * 8), timeout=0.005))
    check(c == grpc.StatusCode.DEADLINE_EXCEEDED, "grpc-timeout: DEADLINE_EXCEEDED")
    # a request in flight, cancelled by the client (RST_STREAM): the server drops it and goes on
    fut = s.ModelInfer.future(infer_request("wenet", [xs[2]] * 16, method="attention_rescoring"))
    time.sleep(0.3)
    fut.cancel()
    check(fut.cancelled() or code_of(fut.result)[0] == grpc.StatusCode.CANCELLED, "client cancel: CANCELLED")
    check(transcripts(s.ModelInfer(infer_request("wenet", [xs[0]]))) ==
          [R[us[0]]["full"]["ctc_greedy_search"]["text"]], "the next request after a cancel")
    # the one-request queue: concurrent requests overflow it
    futs = [s.ModelInfer.future(infer_request("wenet_q1", [xs[2]])) for _ in range(12)]
    codes = [code_of(f.result)[0] for f in futs]
    check(grpc.StatusCode.UNAVAILABLE in codes and grpc.StatusCode.OK in codes,
          "queue full: UNAVAILABLE (%s)" % sorted(set(str(x) for x in codes)))

    st = s.ModelStatistics(pb.ModelStatisticsRequest(name="wenet")).model_stats[0]
    check(st.name == "wenet" and st.inference_count >= 8 and st.inference_stats.queue.count >= 4 and
          st.inference_stats.success.count >= 4, "ModelStatistics counts gRPC traffic")

    # repository control
    s.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="wenet_q1"))
    check(not s.ModelReady(pb.ModelReadyRequest(name="wenet_q1")).ready, "RepositoryModelUnload")
    c, d = code_of(lambda: s.ModelInfer(infer_request("wenet_q1", [xs[0]])))
    check(c in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND),
          "infer on an unloaded model: UNAVAILABLE (%s)" % c)
    s.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="wenet_q1"))
    check(s.ModelReady(pb.ModelReadyRequest(name="wenet_q1")).ready, "RepositoryModelLoad")
    c, d = code_of(lambda: s.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="nope")))
    check(c == grpc.StatusCode.NOT_FOUND, "RepositoryModelLoad unknown: NOT_FOUND (%s)" % c)

    # the CLI clients over gRPC
    wav = os.path.join(golden, "wavs", us[0] + ".wav")
    out = subprocess.run([hark, "transcribe", "--url", "grpc://" + target, "-m", "wenet",
                          "--decoding-method", "ctc_greedy_search", wav],
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 0 and out.stdout.strip() == wav + " " + R[us[0]]["full"]["ctc_greedy_search"]["text"],
          "hark transcribe --url grpc:// (%s)" % (out.stdout.strip() + out.stderr.strip())[:200])
    out = subprocess.run([hark, "perf", "-m", "wenet", "-u", target, "-i", "grpc", "-p", "500",
                          "--max-seconds", "20"], capture_output=True, text=True, timeout=60)
    check(out.returncode == 0 and "Infer/s" in out.stdout and "queue" in out.stdout,
          "hark perf -i grpc with the server-side breakdown")

    # graceful drain: a request in flight at SIGTERM completes; new connections are refused
    slow = s.ModelInfer.future(infer_request("wenet", [xs[2]] * 16, method="attention_rescoring"))
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    ok = code_of(lambda: transcripts(slow.result()))[0] == grpc.StatusCode.OK
    check(ok, "SIGTERM: the request in flight completes")
    ch2 = grpc.insecure_channel(target, options=OPTS)
    c, d = code_of(lambda: pbg.GRPCInferenceServiceStub(ch2).ServerLive(pb.ServerLiveRequest(), timeout=5))
    check(c == grpc.StatusCode.UNAVAILABLE, "after SIGTERM: UNAVAILABLE")
    check(proc.wait(timeout=30) == 0, "server exits 0 after the drain")
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
