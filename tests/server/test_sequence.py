#!/usr/bin/env python3
"""Integration test of sequence batching (run by tests/server/test_sequence_integration.c): a real
`hark serve` with the golden WeNet U2++ model under a config like WeNet's streaming_wenet
(sequence_batching, oldest, 640 ms chunks), driven as WeNet's streaming client drives Triton:
WAV [1, chunk] + WAV_LENS [1, 1] per request with sequence_id / sequence_start / sequence_end,
TRANSCRIPTS [1] back for every chunk. Over HTTP, gRPC ModelInfer and ModelStreamInfer: partial
and final transcripts (final = WeNet's streaming golden), interleaved sequences, the pool
exhausted (429 / RESOURCE_EXHAUSTED), idle timeout, unknown sequences, a client that goes away.
Usage: test_sequence.py HARK_BIN MODEL_DIR GOLDEN_DIR. Exit 0 = pass."""
import array, json, os, queue, re, shutil, struct, subprocess, sys, tempfile, threading, time, wave

import grpc
import requests
from grpc_tools import protoc

hark, model_dir, golden = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
proto_dir = os.path.join(here, "..", "..", "proto")
tmp = tempfile.mkdtemp(prefix="hark-seq-")
gen = os.path.join(tmp, "gen")
os.makedirs(gen)
assert protoc.main(["protoc", "-I" + proto_dir, "--python_out=" + gen, "--grpc_python_out=" + gen,
                    os.path.join(proto_dir, "grpc_service.proto"),
                    os.path.join(proto_dir, "model_config.proto")]) == 0, "protoc failed"
sys.path.insert(0, gen)
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pbg  # noqa: E402

R = json.load(open(os.path.join(golden, "results.json")))
MODE = "stream_chunk16_left-1"  # the server's default stream: chunk 16 (640 ms), all history

# the converter's entry with its dynamic_batching replaced by WeNet's sequence_batching
base_cfg = open(os.path.join(model_dir, "config.pbtxt")).read()
SEQ = """sequence_batching {
  max_sequence_idle_microseconds: %d
  oldest {
    max_candidate_sequences: %d
    preferred_batch_size: [ 2 ]
    max_queue_delay_microseconds: 5000
  }
  control_input [
    { name: "START", control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] } ] },
    { name: "READY", control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [0, 1] } ] },
    { name: "CORRID", control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] },
    { name: "END", control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [0, 1] } ] }
  ]
}"""
repo = os.path.join(tmp, "repo")
for name, idle_us, cands in (("streaming_wenet", 30000000, 2), ("seq_idle", 700000, 1)):
    d = os.path.join(repo, name)
    os.makedirs(d)
    os.symlink(os.path.join(os.path.abspath(model_dir), "1"), os.path.join(d, "1"))
    txt = re.sub(r"dynamic_batching \{[^}]*\}", SEQ % (idle_us, cands), base_cfg)
    txt = re.sub(r'name: "[^"]*"', 'name: "%s"' % name, txt, count=1)
    txt = txt.replace("KIND_GPU", "KIND_CPU")
    open(os.path.join(d, "config.pbtxt"), "w").write(txt)

proc = subprocess.Popen([hark, "serve", "--model-repository", repo, "--http-port", "0",
                         "--grpc-port", "0", "--metrics-port", "-1", "--drain-timeout-ms", "5000"],
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
    n = wave.open(os.path.join(golden, "wavs", u + ".wav")).getnframes()
    data = raw[raw.index(b"data") + 8:][:2 * n]
    return [v / 32768.0 for v in struct.unpack("<%dh" % n, data)]


CHUNK = 10240  # 640 ms at 16 kHz, as WeNet's client sends (the last one zero-padded, WAV_LENS says)


def chunks(x):
    return [x[i:i + CHUNK] for i in range(0, len(x), CHUNK)]


def grpc_req(model, seg, sid, start, end, rid=""):
    q = pb.ModelInferRequest(model_name=model, id=rid)
    t = q.inputs.add()
    t.name, t.datatype = "WAV", "FP32"
    t.shape.extend([1, CHUNK])
    t = q.inputs.add()
    t.name, t.datatype = "WAV_LENS", "INT32"
    t.shape.extend([1, 1])
    q.raw_input_contents.append(array.array("f", seg + [0.0] * (CHUNK - len(seg))).tobytes())
    q.raw_input_contents.append(struct.pack("<i", len(seg)))
    q.outputs.add().name = "TRANSCRIPTS"
    if isinstance(sid, str):
        q.parameters["sequence_id"].string_param = sid
    else:
        q.parameters["sequence_id"].int64_param = sid
    q.parameters["sequence_start"].bool_param = start
    q.parameters["sequence_end"].bool_param = end
    return q


def texts(resp):
    i = [o.name for o in resp.outputs].index("TRANSCRIPTS")
    raw, out, pos = resp.raw_output_contents[i], [], 0
    while pos < len(raw):
        n = struct.unpack_from("<I", raw, pos)[0]
        out.append(raw[pos + 4:pos + 4 + n].decode())
        pos += 4 + n
    return out, list(resp.outputs[i].shape)


def http_chunk(model, seg, sid, start, end, binary=True):
    a = array.array("f", seg + [0.0] * (CHUNK - len(seg))).tobytes()
    lens = struct.pack("<i", len(seg))
    hdr = json.dumps({"inputs": [
        {"name": "WAV", "shape": [1, CHUNK], "datatype": "FP32", "parameters": {"binary_data_size": len(a)}},
        {"name": "WAV_LENS", "shape": [1, 1], "datatype": "INT32", "parameters": {"binary_data_size": 4}}],
        "outputs": [{"name": "TRANSCRIPTS", "parameters": {"binary_data": binary}}],
        "parameters": {"sequence_id": sid, "sequence_start": start, "sequence_end": end}}).encode()
    r = requests.post(base + "/v2/models/%s/infer" % model, data=hdr + a + lens,
                      headers={"Inference-Header-Content-Length": str(len(hdr))})
    if r.status_code != 200:
        return r.status_code, None, None
    if not binary:
        o = r.json()["outputs"][0]
        return 200, o["data"][0], o["shape"]
    hl = int(r.headers["Inference-Header-Content-Length"])
    o = json.loads(r.content[:hl])["outputs"][0]
    n = struct.unpack_from("<I", r.content, hl)[0]
    return 200, r.content[hl + 4:hl + 4 + n].decode(), o["shape"]


try:
    ch = grpc.insecure_channel(target, options=OPTS)
    s = pbg.GRPCInferenceServiceStub(ch)
    t0 = time.time()
    while not s.ServerReady(pb.ServerReadyRequest()).ready:
        assert time.time() - t0 < 120, "not ready within 120 s"
        time.sleep(0.1)
    cfg = requests.get(base + "/v2/models/streaming_wenet/config").json()
    sb = cfg.get("sequence_batching", {})
    check(sb.get("oldest", {}).get("max_candidate_sequences") == 2 and
          [c["name"] for c in sb.get("control_input", [])] == ["START", "READY", "CORRID", "END"] and
          "dynamic_batching" not in cfg, "config: sequence_batching with oldest and control inputs")
    mc = s.ModelConfig(pb.ModelConfigRequest(name="streaming_wenet")).config
    check(mc.WhichOneof("scheduling_choice") == "sequence_batching", "ModelConfig: sequence_batching")

    us = ["sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002"]
    gold = [R[u][MODE]["attention_rescoring"]["text"] for u in us]
    xs = [pcm(u) for u in us]

    # HTTP: one sequence, a partial transcript for every chunk, the final one at END
    cs = chunks(xs[0])
    outs = []
    for i, seg in enumerate(cs):
        st, txt, shape = http_chunk("streaming_wenet", seg, 1001, i == 0, i == len(cs) - 1,
                                    binary=(i % 2 == 0))
        outs.append((st, txt, shape))
    check(all(o[0] == 200 and o[2] == [1] for o in outs), "HTTP: every chunk answered, TRANSCRIPTS [1]")
    check(outs[-1][1] == gold[0], "HTTP: final transcript = WeNet streaming golden (%r vs %r)" %
          (outs[-1][1], gold[0]))
    partials = [o[1] for o in outs[:-1]]
    check(len(cs) > 2 and all(isinstance(p, str) for p in partials) and
          any(partials) and partials[-1] != "",
          "HTTP: partial transcripts before the end (%r)" % partials)
    st, _, _ = http_chunk("streaming_wenet", cs[0], 1001, False, False)
    check(st == 400, "HTTP: a chunk after END (unknown sequence): 400 (%s)" % st)
    st, _, _ = http_chunk("streaming_wenet", cs[0], 4242, False, True)
    check(st == 400, "HTTP: a chunk of a never started sequence: 400")
    r = requests.post(base + "/v2/models/streaming_wenet/infer", json={"inputs": [
        {"name": "WAV", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]},
        {"name": "WAV_LENS", "shape": [1, 1], "datatype": "INT32", "data": [4]}]})
    check(r.status_code == 400 and "sequence_id" in r.text, "HTTP: no sequence_id: 400 naming it")

    # gRPC ModelStreamInfer: two sequences interleaved on one stream (string and integer ids)
    c0, c1 = chunks(xs[0]), chunks(xs[1])
    reqs = []
    for i in range(max(len(c0), len(c1))):
        if i < len(c0):
            reqs.append(grpc_req("streaming_wenet", c0[i], "utt-a", i == 0, i == len(c0) - 1, "a%d" % i))
        if i < len(c1):
            reqs.append(grpc_req("streaming_wenet", c1[i], 77, i == 0, i == len(c1) - 1, "b%d" % i))
    resp = list(s.ModelStreamInfer(iter(reqs)))
    errs = [x.error_message for x in resp if x.error_message]
    by_id = {x.infer_response.id: texts(x.infer_response) for x in resp if not x.error_message}
    check(not errs and len(resp) == len(reqs) and sorted(by_id) == sorted(q.id for q in reqs),
          "ModelStreamInfer: one response per request, ids echoed (%s)" % errs[:2])
    check(all(v[1] == [1] for v in by_id.values()), "ModelStreamInfer: TRANSCRIPTS [1]")
    fa, fb = by_id.get("a%d" % (len(c0) - 1)), by_id.get("b%d" % (len(c1) - 1))
    check(fa and fb and fa[0] == [gold[0]] and fb[0] == [gold[1]],
          "ModelStreamInfer: interleaved finals = goldens (%r, %r)" % (fa, fb))

    # gRPC ModelInfer as WeNet's client: integer id, unary per chunk
    c1 = chunks(xs[1])
    got = [texts(s.ModelInfer(grpc_req("streaming_wenet", seg, 10086, i == 0, i == len(c1) - 1)))[0][0]
           for i, seg in enumerate(c1)]
    check(got[-1] == gold[1], "ModelInfer per chunk: final = golden")

    # the pool: 2 sequences; a third START is refused, without taking a slot
    s.ModelInfer(grpc_req("streaming_wenet", c0[0], 1, True, False))
    s.ModelInfer(grpc_req("streaming_wenet", c0[0], 2, True, False))
    c, d = code_of(lambda: s.ModelInfer(grpc_req("streaming_wenet", c0[0], 3, True, False)))
    check(c == grpc.StatusCode.RESOURCE_EXHAUSTED, "pool full: RESOURCE_EXHAUSTED (%s)" % d)
    st, _, _ = http_chunk("streaming_wenet", c0[0], 4, True, False)
    check(st == 429, "pool full over HTTP: 429 (%s)" % st)
    check(texts(s.ModelInfer(grpc_req("streaming_wenet", c0[1], 1, False, True)))[0][0] != None,
          "the open sequences go on")
    s.ModelInfer(grpc_req("streaming_wenet", c0[1], 2, False, True))
    c, d = code_of(lambda: s.ModelInfer(grpc_req("streaming_wenet", c0[0], 3, True, True)))
    check(c == grpc.StatusCode.OK, "after two ENDs a new sequence starts (%s)" % d)
    c, d = code_of(lambda: s.ModelInfer(grpc_req("streaming_wenet", c0[0], 99, False, False)))
    check(c == grpc.StatusCode.INVALID_ARGUMENT and "99" in d, "unknown sequence: INVALID_ARGUMENT (%s)" % d)

    # a client that goes away: its sequences end, the slots come back
    qq = queue.Queue()

    def gen_reqs():
        while True:
            x = qq.get()
            if x is None:
                return
            yield x

    call = s.ModelStreamInfer(gen_reqs())
    qq.put(grpc_req("streaming_wenet", c0[0], 500, True, False, "d0"))
    qq.put(grpc_req("streaming_wenet", c0[0], 501, True, False, "d1"))
    n = 0
    for x in call:
        n += 1
        if n == 2:
            break
    call.cancel()
    time.sleep(0.5)
    c, d = code_of(lambda: s.ModelInfer(grpc_req("streaming_wenet", c0[0], 502, True, False)))
    c2, d2 = code_of(lambda: s.ModelInfer(grpc_req("streaming_wenet", c0[0], 503, True, False)))
    check(c == c2 == grpc.StatusCode.OK, "cancelled stream: its sequences freed (%s %s)" % (d, d2))
    c, d = code_of(lambda: s.ModelInfer(grpc_req("streaming_wenet", c0[1], 500, False, False)))
    check(c == grpc.StatusCode.INVALID_ARGUMENT, "cancelled stream: its sequence is gone (%s)" % d)
    for sid in (502, 503):
        s.ModelInfer(grpc_req("streaming_wenet", c0[1], sid, False, True))

    # idle timeout (seq_idle: 0.7 s, one slot): the slot comes back, the sequence is gone
    s.ModelInfer(grpc_req("seq_idle", c0[0], 7, True, False))
    c, d = code_of(lambda: s.ModelInfer(grpc_req("seq_idle", c0[0], 8, True, False)))
    check(c == grpc.StatusCode.RESOURCE_EXHAUSTED, "one slot taken: RESOURCE_EXHAUSTED")
    time.sleep(1.5)
    c, d = code_of(lambda: s.ModelInfer(grpc_req("seq_idle", c0[1], 7, False, False)))
    check(c == grpc.StatusCode.INVALID_ARGUMENT, "idle sequence ended: its next chunk is refused (%s)" % d)
    c, d = code_of(lambda: s.ModelInfer(grpc_req("seq_idle", c0[0], 8, True, True)))
    check(c == grpc.StatusCode.OK, "idle sequence's slot freed (%s)" % d)

    # statistics count sequence requests like any other
    st = s.ModelStatistics(pb.ModelStatisticsRequest(name="streaming_wenet")).model_stats[0]
    check(st.inference_stats.queue.count >= 20 and st.inference_stats.success.count >= 20 and
          st.inference_stats.compute_infer.count == st.inference_stats.success.count and
          st.execution_count >= 1, "statistics: queue / compute counted (%d)" % st.inference_stats.queue.count)
    check(any("idle" in l for l in log), "the idle timeout is logged")

    # hark transcribe --streaming: partials as they come, the final one = WeNet's streaming text
    for proto, url in (("http", base), ("grpc", "grpc://" + target)):
        p = subprocess.run([hark, "transcribe", "--url", url, "-m", "streaming_wenet",
                            "--streaming", "--format", "json"] +
                           [os.path.join(golden, "wavs", u + ".wav") for u in us],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        js = json.loads(p.stdout) if p.returncode == 0 else []
        check(p.returncode == 0 and [j["text"] for j in js] == gold and
              all(len(j["partials"]) >= 1 for j in js) and "partial: " in p.stderr,
              "hark transcribe --streaming over %s: finals = WeNet's streaming texts (%s)" %
              (proto, p.stderr[-200:]))

    # hark perf --streaming against it: real-time pace over HTTP, as fast as possible over gRPC
    import csv
    wav = os.path.join(golden, "wavs", sorted(R)[0] + ".wav")
    for proto, addr, pace in (("http", base[7:], "realtime"), ("grpc", target, "fast")):
        out = os.path.join(tmp, "sp-%s.csv" % proto)
        p = subprocess.run([hark, "perf", "--streaming", "-m", "streaming_wenet", "-u", addr,
                            "-i", proto, "--pace", pace, "--concurrency-range", "1:2",
                            "-p", "2500", "--input-data", wav, "-f", out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        rows = list(csv.DictReader(open(out))) if os.path.exists(out) else []
        ok = p.returncode == 0 and len(rows) == 2
        for r in rows:
            x = {k: float(v) for k, v in r.items()}
            ok = ok and x["errors"] == 0 and x["chunks"] > 0 and x["sequences"] >= 1 and \
                0 < x["latency_p50_us"] <= x["latency_p90_us"] <= x["latency_p99_us"] <= \
                x["latency_max_us"] and x["final_p50_us"] > 0 and \
                abs(x["chunks_per_sec"] * x["window_s"] - x["chunks"]) < 1.5
        check(ok and ("sustained" in p.stdout or pace == "fast"),
              "hark perf --streaming over %s (%s): %s" % (proto, pace, p.stdout[-300:]))
except Exception as e:  # noqa: BLE001
    import traceback
    traceback.print_exc()
    failures.append("exception: %r" % e)
finally:
    if proc.poll() is None:
        proc.terminate()
        try:
            rc = proc.wait(timeout=30)
            if rc != 0:
                failures.append("server exit status %d" % rc)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            failures.append("server did not exit on SIGTERM")
    if failures:
        print("".join(log[-40:]))
    shutil.rmtree(tmp, ignore_errors=True)

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
