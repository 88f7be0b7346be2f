#!/usr/bin/env python3
"""Integration test of a streaming icefall zipformer under `hark serve` (run by
tests/server/test_server_icefall_stream.c): a small generated causal zipformer converted with
`convert_icefall.py --streaming 2` (sequence_batching, sherpa's model_repo_streaming controls) under
sherpa's model name `transducer`, driven as sherpa's Triton client (Triton-ASR-Client client.py
--streaming) drives Triton: gRPC ModelInfer per chunk, WAV FP32 [1, chunk] zero-padded with WAV_LENS
[1, 1] its real length, sequence_id / sequence_start / sequence_end, a first chunk of 850 ms and
640 ms after it, TRANSCRIPTS [1] back. The final transcripts must be the stream's text computed by
the C test through the engine (greedy and, from config.pbtxt, modified_beam_search); partials only
grow; interleaved sequences, HTTP, FP16 audio, ModelStreamInfer, WeNet's WebSocket protocol and
`hark transcribe --url --streaming` give the same; the pool exhausted, unknown sequences and audio
after the end are refused. Endpointing over the WebSocket (DATA_DIR/ms_ep, a model that emits
nothing on quiet audio, served as transducer_ep): with continuous decoding a final result per
segment, the engine's (expected_ep.json), then the end's; without, the first segment's and
speech_end.
Usage: test_server_icefall_stream.py HARK_BIN MODEL_DIR DATA_DIR (pcm.npy, expected.json, ms_ep,
pcm_ep.npy, expected_ep.json).
Exit 0 = pass."""
import array, json, os, re, shutil, struct, subprocess, sys, tempfile, time, wave

import grpc
import numpy as np
import requests
from grpc_tools import protoc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server, WS  # noqa: E402

hark, model_dir, data = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
proto_dir = os.path.join(here, "..", "..", "proto")
tmp = tempfile.mkdtemp(prefix="hark-icefall-seq-")
gen = os.path.join(tmp, "gen")
os.makedirs(gen)
assert protoc.main(["protoc", "-I" + proto_dir, "--python_out=" + gen, "--grpc_python_out=" + gen,
                    os.path.join(proto_dir, "grpc_service.proto"),
                    os.path.join(proto_dir, "model_config.proto")]) == 0, "protoc failed"
sys.path.insert(0, gen)
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pbg  # noqa: E402

EXP = json.load(open(os.path.join(data, "expected.json")))
X = np.load(os.path.join(data, "pcm.npy")).astype("<f4")  # int16 values / 32768
GREEDY, BEAM = EXP["greedy_search"], EXP["modified_beam_search"]

repo = os.path.join(tmp, "repo")
os.makedirs(repo)
EP = json.load(open(os.path.join(data, "expected_ep.json")))["segments"]
XEP = np.load(os.path.join(data, "pcm_ep.npy")).astype("<f4")
for name, method, src in (("transducer", None, model_dir),
                          ("transducer_mbs", "modified_beam_search", model_dir),
                          ("transducer_ep", None, os.path.join(data, "ms_ep"))):
    d = os.path.join(repo, name)
    shutil.copytree(src, d)
    p = os.path.join(d, "config.pbtxt")
    txt = re.sub(r'name: "[^"]*"', 'name: "%s"' % name, open(p).read(), count=1)
    if method:
        txt = txt.replace('string_value: "greedy_search"', 'string_value: "%s"' % method)
    open(p, "w").write(txt)
wav_path = os.path.join(tmp, "utt.wav")
with wave.open(wav_path, "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(16000)
    w.writeframes(np.round(X * 32768).astype("<i2").tobytes())

# Triton-ASR-Client's chunks for an icefall model: (chunk 16 + 2 + right context 2) x 4 + 3 frames
# + 2 for the window, 10 ms each (850 ms) first, then 16 x 4 x 10 ms (640 ms)
FIRST, OTHER = int(0.85 * 16000), int(0.64 * 16000)


def segments(x):
    out, j = [], 0
    while j < len(x):
        k = FIRST if j == 0 else OTHER
        out.append(x[j:j + k])
        j += len(out[-1])
    return out


def grpc_req(model, seg, size, sid, start, end, rid="", dt="FP32"):
    q = pb.ModelInferRequest(model_name=model, id=rid)
    t = q.inputs.add()
    t.name, t.datatype = "WAV", dt
    t.shape.extend([1, size])
    t = q.inputs.add()
    t.name, t.datatype = "WAV_LENS", "INT32"
    t.shape.extend([1, 1])
    a = np.zeros(size, dtype="<f2" if dt == "FP16" else "<f4")
    a[:len(seg)] = seg
    q.raw_input_contents.append(a.tobytes())
    q.raw_input_contents.append(struct.pack("<i", len(seg)))
    q.outputs.add().name = "TRANSCRIPTS"
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


def code_of(fn):
    try:
        fn()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def grows(ts):
    return all(b.startswith(a) for a, b in zip(ts, ts[1:]))


def http_chunk(base, model, seg, size, sid, start, end):
    a = np.zeros(size, dtype="<f4")
    a[:len(seg)] = seg
    a = a.tobytes()
    hdr = json.dumps({"inputs": [
        {"name": "WAV", "shape": [1, size], "datatype": "FP32",
         "parameters": {"binary_data_size": len(a)}},
        {"name": "WAV_LENS", "shape": [1, 1], "datatype": "INT32",
         "parameters": {"binary_data_size": 4}}],
        "outputs": [{"name": "TRANSCRIPTS", "parameters": {"binary_data": False}}],
        "parameters": {"sequence_id": sid, "sequence_start": start,
                       "sequence_end": end}}).encode()
    r = requests.post(base + "/v2/models/%s/infer" % model, data=hdr + a + struct.pack("<i", len(seg)),
                      headers={"Inference-Header-Content-Length": str(len(hdr))})
    return r.status_code, (r.json()["outputs"][0]["data"][0] if r.status_code == 200 else r.text)


check = Checks()
srv = Server(hark, repo, grpc=True, args=["--http-threads", "1"])
try:
    srv.wait_ready()
    target = "127.0.0.1:%d" % srv.grpc_port
    ch = grpc.insecure_channel(target)
    s = pbg.GRPCInferenceServiceStub(ch)
    cfg = requests.get(srv.base + "/v2/models/transducer/config").json()
    sb = cfg.get("sequence_batching", {})
    check(sb.get("oldest", {}).get("max_candidate_sequences") == 2 and
          [c["name"] for c in sb.get("control_input", [])] == ["START", "READY", "CORRID", "END"]
          and "dynamic_batching" not in cfg,
          "the converter's --streaming config: sequence_batching, START/READY/CORRID/END")

    # sherpa's client: unary ModelInfer per chunk
    segs = segments(X)
    outs = []
    for i, seg in enumerate(segs):
        outs.append(texts(s.ModelInfer(grpc_req("transducer", seg, FIRST if i == 0 else OTHER,
                                                10086, i == 0, i == len(segs) - 1))))
    got = [o[0][0] for o in outs]
    check(all(o[1] == [1] for o in outs) and len(segs) > 3, "TRANSCRIPTS [1] for every chunk")
    check(got[-1] == GREEDY, "gRPC per chunk: the final text is the stream's (%r vs %r)" %
          (got[-1][:60], GREEDY[:60]))
    check(grows(got) and any(got[:-1]), "partial texts grow chunk by chunk (%r)" % got[:3])

    # two sequences interleaved (greedy and the beam model), then each alone gave the same
    a, b = [], []
    for i, seg in enumerate(segs):
        size = FIRST if i == 0 else OTHER
        a.append(texts(s.ModelInfer(grpc_req("transducer", seg, size, 1, i == 0,
                                             i == len(segs) - 1)))[0][0])
        b.append(texts(s.ModelInfer(grpc_req("transducer_mbs", seg, size, 2, i == 0,
                                             i == len(segs) - 1)))[0][0])
    check(a[-1] == GREEDY and b[-1] == BEAM,
          "interleaved: greedy and modified_beam_search (config.pbtxt) finals (%r, %r)" %
          (a[-1][:40], b[-1][:40]))
    # the request's method at START
    r = grpc_req("transducer", segs[0], FIRST, 3, True, False)
    r.parameters["decoding_method"].string_param = "modified_beam_search"
    s.ModelInfer(r)
    fin = [texts(s.ModelInfer(grpc_req("transducer", seg, OTHER, 3, False, i == len(segs) - 2)))
           for i, seg in enumerate(segs[1:])][-1][0][0]
    check(fin == BEAM, "decoding_method modified_beam_search at START: the beam's text")

    # FP16 audio as sherpa's configs declare it: the samples are int16 / 32768, exact in FP16
    # only up to 11 bits; the same text as those FP16 values through FP32
    outs16 = [texts(s.ModelInfer(grpc_req("transducer", seg, FIRST if i == 0 else OTHER, 5,
                                          i == 0, i == len(segs) - 1, dt="FP16")))[0][0]
              for i, seg in enumerate(segs)]
    x16 = X.astype("<f2").astype("<f4")
    outs32 = [texts(s.ModelInfer(grpc_req("transducer", seg, FIRST if i == 0 else OTHER, 6,
                                          i == 0, i == len(segs) - 1)))[0][0]
              for i, seg in enumerate(segments(x16))]
    check(outs16[-1] == outs32[-1], "WAV FP16 = the same samples in FP32")

    # HTTP, odd chunks: the same final text
    n = 0
    hs = []
    for i, j in enumerate(range(0, len(X), 3001)):
        seg = X[j:j + 3001]
        hs.append(http_chunk(srv.base, "transducer", seg, 3001, 11, i == 0, j + 3001 >= len(X)))
    check(all(h[0] == 200 for h in hs) and hs[-1][1] == GREEDY,
          "HTTP in chunks of 3001 samples: the same final text (%s)" % (hs[-1],))

    # ModelStreamInfer: two sequences on one stream
    reqs = []
    for i, seg in enumerate(segs):
        size = FIRST if i == 0 else OTHER
        reqs.append(grpc_req("transducer", seg, size, 21, i == 0, i == len(segs) - 1, "a%d" % i))
        reqs.append(grpc_req("transducer_mbs", seg, size, 22, i == 0, i == len(segs) - 1,
                             "b%d" % i))
    resp = list(s.ModelStreamInfer(iter(reqs)))
    errs = [x.error_message for x in resp if x.error_message]
    by_id = {x.infer_response.id: texts(x.infer_response)[0][0] for x in resp
             if not x.error_message}
    last = len(segs) - 1
    check(not errs and by_id.get("a%d" % last) == GREEDY and by_id.get("b%d" % last) == BEAM,
          "ModelStreamInfer: interleaved finals (%s)" % errs[:2])

    # the pool (2 sequences): a third START is refused; unknown sequences; audio after the end
    s.ModelInfer(grpc_req("transducer", segs[0], FIRST, 31, True, False))
    s.ModelInfer(grpc_req("transducer", segs[0], FIRST, 32, True, False))
    c, d = code_of(lambda: s.ModelInfer(grpc_req("transducer", segs[0], FIRST, 33, True, False)))
    check(c == grpc.StatusCode.RESOURCE_EXHAUSTED, "too many sequences: RESOURCE_EXHAUSTED (%s)" % d)
    st, _ = http_chunk(srv.base, "transducer", segs[0], FIRST, 34, True, False)
    check(st == 429, "too many sequences over HTTP: 429 (%s)" % st)
    for sid in (31, 32):
        s.ModelInfer(grpc_req("transducer", segs[1], OTHER, sid, False, True))
    c, d = code_of(lambda: s.ModelInfer(grpc_req("transducer", segs[1], OTHER, 31, False, False)))
    check(c == grpc.StatusCode.INVALID_ARGUMENT and "31" in d,
          "audio after the END (the sequence is gone): INVALID_ARGUMENT (%s)" % d)
    c, d = code_of(lambda: s.ModelInfer(grpc_req("transducer", segs[1], OTHER, 777, False, True)))
    check(c == grpc.StatusCode.INVALID_ARGUMENT and "777" in d,
          "unknown CORRID: INVALID_ARGUMENT (%s)" % d)

    # WeNet's WebSocket protocol on the HTTP port (partials, the final result)
    ws = WS(srv.port, "/?model=transducer")
    check(ws.ok, "WebSocket upgrade")
    ws.text({"signal": "start", "nbest": 1, "continuous_decoding": False})
    msgs, _ = ws.messages("server_ready")
    pcm16 = np.round(X * 32768).astype("<i2").tobytes()
    for j in range(0, len(pcm16), 6400):
        ws.send(2, pcm16[j:j + 6400])
    ws.text({"signal": "end"})
    msgs, _ = ws.messages("speech_end")
    finals = [json.loads(m["nbest"])[0]["sentence"] for m in msgs if m.get("type") == "final_result"]
    parts = [json.loads(m["nbest"])[0]["sentence"] for m in msgs
             if m.get("type") == "partial_result"]
    check(" ".join(finals) == GREEDY and len(parts) > 0,
          "WebSocket: the final result is the stream's text (%r)" % (finals,))

    # WebSocket endpointing (always on, as WeNet's server): a final result per segment
    def ep_session(cont):
        w = WS(srv.port, "/?model=transducer_ep")
        w.text({"signal": "start", "nbest": 1, "continuous_decoding": cont})
        w.messages("server_ready")
        pcm = np.round(XEP * 32768).astype("<i2").tobytes()
        try:  # without continuous decoding the server closes once recognition stopped
            for j in range(0, len(pcm), 8000):
                w.send(2, pcm[j:j + 8000])
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

    msgs = ep_session(True)
    types = [m.get("type") for m in msgs]
    fins = [json.loads(m["nbest"])[0] for m in msgs if m.get("type") == "final_result"]
    check([f["sentence"] for f in fins] == EP,
          "WebSocket, continuous: the engine's segments as final results (%r vs %r)" %
          ([f["sentence"][:20] for f in fins], [e[:20] for e in EP]))
    starts = [wp["start"] for f in fins for wp in f.get("word_pieces", [])]
    check(starts == sorted(starts) and starts and starts[-1] > 8000,
          "WebSocket, continuous: word times count from the stream's start (%s)" % starts[-3:])
    check(types[-2:] == ["final_result", "speech_end"] and types.count("speech_end") == 1,
          "WebSocket, continuous: final_result, speech_end at the end (%s)" % types[-4:])
    msgs = ep_session(False)
    types = [m.get("type") for m in msgs]
    fins = [json.loads(m["nbest"])[0]["sentence"] for m in msgs if m.get("type") == "final_result"]
    check(fins == EP[:1] and types[-1] == "speech_end" and types.count("speech_end") == 1,
          "WebSocket, not continuous: the first segment, then speech_end (%s)" % types[-4:])

    # hark transcribe --url --streaming (gRPC): partials as they come, the final text
    p = subprocess.run([hark, "transcribe", "--url", "grpc://" + target, "-m", "transducer",
                        "--streaming", "--format", "json", wav_path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    js = json.loads(p.stdout) if p.returncode == 0 else []
    check(p.returncode == 0 and [j["text"] for j in js] == [GREEDY],
          "hark transcribe --streaming: the final text (%s)" % p.stderr[-200:])
finally:
    rc = srv.stop()
    if rc not in (0, None) or check.failures:
        print("".join(srv.log[-40:]))
    shutil.rmtree(tmp, ignore_errors=True)
check.exit()
