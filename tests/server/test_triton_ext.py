#!/usr/bin/env python3
"""Triton's protocol extensions that perf_analyzer and tritonclient use (issue 23, Server), with a
copy of the bundled demo recogniser (models/demo-en-asr): /v2/logging (hark's real logger: a
setting changes what the server's log shows), /v2/trace/setting and a model's trace settings,
system shared memory (register / status / unregister, inputs read from a region and outputs
written into one, bad offsets and sizes, unknown regions, the descriptor closed on unregister),
/v2/cudasharedmemory answering that it is not supported, the restricted-API groups logging,
trace and shared-memory; and the same over gRPC (LogSettings, TraceSetting,
SystemSharedMemory*, ModelInfer with regions).
Usage: test_triton_ext.py HARK_BIN. Run from the repository root. Exit 0 = pass."""
import json, os, re, shutil, struct, sys, tempfile, wave
from multiprocessing import shared_memory

import numpy as np
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server, texts_of  # noqa: E402

hark = sys.argv[1]
EX = "examples/demo-en"
KEY = sorted(l.split(" ", 1)[0] for l in open(os.path.join(EX, "trans.txt")))[0]
tmp = os.path.realpath(tempfile.mkdtemp(prefix="hark-ext-"))
repo = os.path.join(tmp, "repo")
os.makedirs(repo)
shutil.copytree("models/demo-en-asr", os.path.join(repo, "asr"),
                ignore=shutil.ignore_patterns("README.md"))
cfg = os.path.join(repo, "asr", "config.pbtxt")
txt = open(cfg).read()
open(cfg, "w").write(re.sub(r'name: "[^"]*"', 'name: "asr"', txt, count=1))
check = Checks()

try:
    import grpc
    from grpc_tools import protoc
    gen = os.path.join(tmp, "gen")
    os.makedirs(gen)
    assert protoc.main(["protoc", "-Iproto", "--python_out=" + gen, "--grpc_python_out=" + gen,
                        "proto/grpc_service.proto", "proto/model_config.proto"]) == 0
    sys.path.insert(0, gen)
    import grpc_service_pb2 as pb  # noqa: E402
    import grpc_service_pb2_grpc as pbg  # noqa: E402
except ImportError:
    grpc = None
    print("note: no python3-grpcio / grpc_tools: the gRPC half is skipped")

with wave.open(os.path.join(EX, KEY + ".wav")) as w:
    pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
wav = pcm.reshape(1, -1)
lens = np.array([[wav.shape[1]]], dtype=np.int32)
regions = []  # every object this test creates, unlinked at the end


def new_object(size):
    """a POSIX shared memory object of size bytes (its key, with the leading '/'), and the
    client's own mapping of it"""
    m = shared_memory.SharedMemory(create=True, size=size)
    regions.append(m)
    return "/" + m.name, m


def post(srv, path, body=None, headers=None):
    return requests.post(srv.base + path, data=json.dumps(body) if body is not None else b"",
                         headers=headers)


def err_of(r):
    try:
        return r.json().get("error", "")
    except ValueError:
        return r.text


def shm_infer(srv, inputs, outputs):
    """an infer request whose inputs are [(name, dtype, shape, region, offset, byte_size)] or
    [(name, dtype, ndarray)] (JSON data) and outputs [(name, region, offset, byte_size)]"""
    ins = []
    for i in inputs:
        if len(i) == 3:
            ins.append({"name": i[0], "datatype": i[1], "shape": list(i[2].shape),
                        "data": i[2].flatten().tolist()})
        else:
            p = {"shared_memory_region": i[3], "shared_memory_byte_size": i[5]}
            if i[4] is not None:
                p["shared_memory_offset"] = i[4]
            ins.append({"name": i[0], "datatype": i[1], "shape": i[2], "parameters": p})
    outs = [{"name": o[0], "parameters": {"shared_memory_region": o[1], "shared_memory_offset": o[2],
                                          "shared_memory_byte_size": o[3]}} for o in outputs]
    return requests.post(srv.base + "/v2/models/asr/infer", json={"inputs": ins, "outputs": outs})


def fds_on(pid, key):
    """how many of the server's descriptors are open on the shared memory object key"""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, fd)) == "/dev/shm" + key
        except OSError:
            pass
    return n


srv = Server(hark, repo, grpc=grpc is not None)
try:
    srv.wait_ready(120)
    md = requests.get(srv.base + "/v2").json()
    check(all(x in md["extensions"] for x in ("system_shared_memory", "logging", "trace")),
          "server metadata lists system_shared_memory, logging, trace (%s)" % md["extensions"])
    st, _, blob = srv.infer("asr", [("WAV", "FP32", wav), ("WAV_LENS", "INT32", lens)],
                            "TRANSCRIPTS")
    ref = texts_of(blob)[0] if st == 200 else None
    check(st == 200 and ref, "plain infer (the reference text): %r" % ref)

    # ---- logging ----------------------------------------------------------------------------
    r = requests.get(srv.base + "/v2/logging")
    lg = r.json()
    check(r.status_code == 200 and lg == {"log_file": "", "log_info": True, "log_warning": True,
                                          "log_error": True, "log_verbose_level": 0,
                                          "log_format": "default"},
          "GET /v2/logging: Triton's settings at their defaults (%s)" % lg)
    r = post(srv, "/v2/logging", {"log_info": False, "log_verbose_level": 1})
    check(r.status_code == 200 and r.json()["log_info"] is False and
          r.json()["log_verbose_level"] == 1 and r.json()["log_warning"] is True,
          "POST /v2/logging sets log_info and log_verbose_level, returns every setting (%s)" % r.text)
    check(requests.get(srv.base + "/v2/logging").json()["log_info"] is False,
          "GET /v2/logging reports the new settings")
    key_a, obj_a = new_object(4096)
    n0 = len(srv.log)
    check(post(srv, "/v2/systemsharedmemory/region/quiet/register",
               {"key": key_a, "offset": 0, "byte_size": 4096}).status_code == 200,
          "a register while info is off")
    post(srv, "/v2/systemsharedmemory/region/quiet/unregister")
    check(not any("quiet" in l for l in srv.log[n0:]),
          "with log_info false the server logs no info line about it")
    r = post(srv, "/v2/logging", {"log_info": True, "log_verbose_level": 0, "log_format": "ISO8601"})
    check(r.status_code == 200 and r.json()["log_format"] == "ISO8601", "log_format ISO8601 set")
    n0 = len(srv.log)
    post(srv, "/v2/systemsharedmemory/region/loud/register", {"key": key_a, "byte_size": 16})
    post(srv, "/v2/systemsharedmemory/region/loud/unregister")
    import time
    t0 = time.time()
    while not any("'loud'" in l for l in srv.log[n0:]) and time.time() - t0 < 10:
        time.sleep(0.05)
    lines = [l for l in srv.log[n0:] if "'loud'" in l]
    check(lines and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", lines[0]),
          "with log_info true the line is logged, in ISO 8601 (%r)" % lines[:1])
    post(srv, "/v2/logging", {"log_format": "default"})
    for body, want in (({"log_info": "yes"}, "log_info must be true or false"),
                       ({"log_verbose_level": -1}, "log_verbose_level must be an integer"),
                       ({"log_format": "xml"}, "log_format"),
                       ({"log_file": "/tmp/x.log"}, "log file location can not be updated"),
                       ({"log_levels": 1}, "unknown log setting 'log_levels'")):
        r = post(srv, "/v2/logging", body)
        check(r.status_code == 400 and want in err_of(r),
              "POST /v2/logging %s: 400 %r (%s)" % (body, want, r.text))
    r = requests.post(srv.base + "/v2/logging", data=b"[1]")
    check(r.status_code == 400, "a log setting body that is no object: 400")
    check(requests.get(srv.base + "/v2/logging").json()["log_info"] is True,
          "a refused update changes nothing")

    # ---- trace ------------------------------------------------------------------------------
    r = requests.get(srv.base + "/v2/trace/setting")
    check(r.status_code == 200 and r.json() == {"trace_level": ["OFF"], "trace_rate": "1000",
                                                "trace_count": "-1", "log_frequency": "0",
                                                "trace_file": "", "trace_mode": "triton"},
          "GET /v2/trace/setting: Triton's defaults (%s)" % r.text)
    r = post(srv, "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"], "trace_rate": "10"})
    check(r.status_code == 200 and r.json()["trace_level"] == ["TIMESTAMPS"] and
          r.json()["trace_rate"] == "10", "POST /v2/trace/setting sets level and rate (%s)" % r.text)
    r = post(srv, "/v2/models/asr/trace/setting", {"trace_count": "5", "log_frequency": 2})
    t = r.json()
    check(r.status_code == 200 and t["trace_count"] == "5" and t["log_frequency"] == "2" and
          t["trace_level"] == ["TIMESTAMPS"] and t["trace_rate"] == "10",
          "a model's own trace settings over the global ones (%s)" % r.text)
    g = requests.get(srv.base + "/v2/trace/setting").json()
    check(g["trace_count"] == "-1" and g["log_frequency"] == "0",
          "the global settings keep their values (%s)" % g)
    post(srv, "/v2/trace/setting", {"trace_rate": "20"})
    m = requests.get(srv.base + "/v2/models/asr/trace/setting").json()
    check(m["trace_rate"] == "20" and m["trace_count"] == "5",
          "a model follows the global values it did not set (%s)" % m)
    m = post(srv, "/v2/models/asr/trace/setting", {"trace_count": None}).json()
    check(m["trace_count"] == "-1", "null clears a model's value back to the global one (%s)" % m)
    m = post(srv, "/v2/models/asr/trace/setting", {}).json()
    check(m["log_frequency"] == "0", "an empty update drops the model's own settings (%s)" % m)
    g = post(srv, "/v2/trace/setting", {"trace_level": None, "trace_rate": None}).json()
    check(g["trace_level"] == ["OFF"] and g["trace_rate"] == "1000",
          "null resets a global value to its default (%s)" % g)
    for path, body, code, want in (
            ("/v2/trace/setting", {"trace_level": ["LOUD"]}, 400, "unknown trace_level 'LOUD'"),
            ("/v2/trace/setting", {"trace_level": ["OFF", "TENSORS"]}, 400, "'OFF'"),
            ("/v2/trace/setting", {"trace_rate": "ten"}, 400, "Unable to parse 'trace_rate'"),
            ("/v2/trace/setting", {"trace_count": "-2"}, 400, "Unable to parse 'trace_count'"),
            ("/v2/trace/setting", {"trace_file": "/tmp/t.json"}, 400,
             "trace file location can not be updated"),
            ("/v2/models/nope/trace/setting", {}, 400, "Request for unknown model : nope"),
            ("/v2/models/asr/versions/1/trace/setting", {}, 400, "no version")):
        r = post(srv, path, body)
        check(r.status_code == code and want in err_of(r),
              "POST %s %s: %d %r (%d %s)" % (path, body, code, want, r.status_code, r.text))

    # ---- system shared memory ---------------------------------------------------------------
    in_bytes = wav.astype("<f4").tobytes()
    key_in, obj_in = new_object(8192 + len(in_bytes))
    obj_in.buf[100:100 + len(in_bytes)] = in_bytes  # the tensor 100 bytes into the object
    key_out, obj_out = new_object(4096)
    r = post(srv, "/v2/systemsharedmemory/region/input0/register",
             {"key": key_in, "offset": 100, "byte_size": len(in_bytes)})
    check(r.status_code == 200, "register input0 at offset 100 of %s (%s)" % (key_in, r.text))
    r = post(srv, "/v2/systemsharedmemory/region/output0/register",
             {"key": key_out, "offset": 0, "byte_size": 4096})
    check(r.status_code == 200, "register output0 (%s)" % r.text)
    check(fds_on(srv.proc.pid, key_in) == 1, "the server holds input0's object open")
    r = requests.get(srv.base + "/v2/systemsharedmemory/status")
    check(r.status_code == 200 and r.json() == [
        {"name": "input0", "key": key_in, "offset": 100, "byte_size": len(in_bytes)},
        {"name": "output0", "key": key_out, "offset": 0, "byte_size": 4096}],
        "status lists both regions as Triton does (%s)" % r.text)
    r = requests.get(srv.base + "/v2/systemsharedmemory/region/output0/status")
    check(r.status_code == 200 and [x["name"] for x in r.json()] == ["output0"],
          "status of one region")
    r = requests.get(srv.base + "/v2/systemsharedmemory/region/nope/status")
    check(r.status_code == 404 and "Unable to find system shared memory region: 'nope'" in err_of(r),
          "status of an unknown region: 404 (%s)" % r.text)
    r = post(srv, "/v2/systemsharedmemory/region/input0/register",
             {"key": key_in, "byte_size": 16})
    check(r.status_code == 400 and "already in manager" in err_of(r), "a name registered twice")
    for body, want in (({"key": key_in, "offset": 8000, "byte_size": 4096 + len(in_bytes)},
                        "is past the end of"),
                       ({"key": "/hark-no-such-object", "byte_size": 16}, "unable to open"),
                       ({"offset": 0, "byte_size": 16}, "no 'key' field"),
                       ({"key": key_in}, "no 'byte_size' field"),
                       ({"key": key_in, "byte_size": 16, "offset": -1}, "'offset'")):
        r = post(srv, "/v2/systemsharedmemory/region/bad/register", body)
        check(r.status_code == 400 and want in err_of(r),
              "register %s: 400 %r (%s)" % (body, want, r.text))
    r = requests.get(srv.base + "/v2/systemsharedmemory/region/input0/register")
    check(r.status_code == 405, "register with GET: 405")

    r = shm_infer(srv, [("WAV", "FP32", list(wav.shape), "input0", None, len(in_bytes)),
                        ("WAV_LENS", "INT32", lens)], [("TRANSCRIPTS", "output0", 64, 1024)])
    o = r.json()["outputs"][0] if r.status_code == 200 else {}
    p = o.get("parameters", {})
    n = p.get("shared_memory_byte_size", 0)
    got = texts_of(bytes(obj_out.buf[64:64 + n])) if n else []
    check(r.status_code == 200 and p.get("shared_memory_region") == "output0" and
          p.get("shared_memory_offset") == 64 and "data" not in o,
          "infer with WAV from input0: the response names output0 instead of data (%s)" % r.text)
    check(got == [ref], "the transcript in output0 at offset 64 is the plain request's (%r)" % got)

    # bounds and names
    for ins, outs, want in (
            ([("WAV", "FP32", list(wav.shape), "input0", 4, len(in_bytes)),
              ("WAV_LENS", "INT32", lens)], [], "is past its end"),
            ([("WAV", "FP32", list(wav.shape), "input0", None, len(in_bytes) - 4),
              ("WAV_LENS", "INT32", lens)], [], "does not match shape"),
            ([("WAV", "FP32", list(wav.shape), "nope", None, len(in_bytes)),
              ("WAV_LENS", "INT32", lens)], [], "unknown shared memory region 'nope'"),
            ([("WAV", "FP32", list(wav.shape), "input0", None, len(in_bytes)),
              ("WAV_LENS", "INT32", lens)], [("TRANSCRIPTS", "output0", 4000, 200)],
             "is past its end"),
            ([("WAV", "FP32", list(wav.shape), "input0", None, len(in_bytes)),
              ("WAV_LENS", "INT32", lens)], [("TRANSCRIPTS", "nope", 0, 200)],
             "unknown shared memory region 'nope'"),
            ([("WAV", "FP32", list(wav.shape), "input0", None, len(in_bytes)),
              ("WAV_LENS", "INT32", lens)], [("TRANSCRIPTS", "output0", 0, 4)],
             "more than the 4 of its shared_memory_byte_size")):
        r = shm_infer(srv, ins, outs)
        check(r.status_code == 400 and want in err_of(r),
              "infer: 400 %r (%d %s)" % (want, r.status_code, r.text[:200]))
    r = requests.post(srv.base + "/v2/models/asr/infer", json={"inputs": [
        {"name": "WAV", "datatype": "FP32", "shape": [1, 1], "data": [0.0],
         "parameters": {"shared_memory_region": "input0", "shared_memory_byte_size": 4}}]})
    check(r.status_code == 400 and "only one of 'data'" in err_of(r), "data and a region: 400")

    # unregister: the descriptor is closed, the region gone
    r = post(srv, "/v2/systemsharedmemory/region/input0/unregister")
    check(r.status_code == 200, "unregister input0")
    check(fds_on(srv.proc.pid, key_in) == 0, "input0's object is closed by the server")
    r = shm_infer(srv, [("WAV", "FP32", list(wav.shape), "input0", None, len(in_bytes)),
                        ("WAV_LENS", "INT32", lens)], [])
    check(r.status_code == 400 and "unknown shared memory region 'input0'" in err_of(r),
          "infer naming an unregistered region: 400")
    check(post(srv, "/v2/systemsharedmemory/region/never/unregister").status_code == 200,
          "unregister of an unknown name: 200 (as Triton)")
    post(srv, "/v2/systemsharedmemory/region/extra/register", {"key": key_out, "byte_size": 8})
    check(post(srv, "/v2/systemsharedmemory/unregister").status_code == 200 and
          requests.get(srv.base + "/v2/systemsharedmemory/status").json() == [] and
          fds_on(srv.proc.pid, key_out) == 0,
          "unregister without a name drops every region and closes their objects")

    # CUDA shared memory: a clear answer
    r = post(srv, "/v2/cudasharedmemory/region/g/register",
             {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 16})
    check(r.status_code == 400 and "CUDA shared memory is not supported by hark" in err_of(r),
          "cudasharedmemory register: 400 not supported (%s)" % r.text)
    r = requests.get(srv.base + "/v2/cudasharedmemory/status")
    check(r.status_code == 200 and r.json() == [], "cudasharedmemory status: none registered")
    check(post(srv, "/v2/cudasharedmemory/unregister").status_code == 200,
          "cudasharedmemory unregister: nothing to do")
    r = requests.get(srv.base + "/v2/systemsharedmemory/region/a/b/status")
    check(r.status_code == 404, "a malformed shared memory path: 404")

    # ---- gRPC --------------------------------------------------------------------------------
    if grpc is not None:
        stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % srv.grpc_port))
        ls = stub.LogSettings(pb.LogSettingsRequest())
        check(ls.settings["log_info"].bool_param is True and
              ls.settings["log_format"].string_param == "default" and
              ls.settings["log_verbose_level"].WhichOneof("parameter_choice") == "uint32_param",
              "gRPC LogSettings: the settings with Triton's value types")
        q = pb.LogSettingsRequest()
        q.settings["log_verbose_level"].uint32_param = 2
        q.settings["log_warning"].bool_param = False
        ls = stub.LogSettings(q)
        check(ls.settings["log_verbose_level"].uint32_param == 2 and
              not ls.settings["log_warning"].bool_param, "gRPC LogSettings sets them")
        check(requests.get(srv.base + "/v2/logging").json()["log_verbose_level"] == 2,
              "the same logger over HTTP")
        q = pb.LogSettingsRequest()
        q.settings["log_verbose_level"].uint32_param = 0
        q.settings["log_warning"].bool_param = True
        stub.LogSettings(q)
        q = pb.LogSettingsRequest()
        q.settings["log_info"].string_param = "yes"
        try:
            stub.LogSettings(q)
            check(False, "gRPC LogSettings with a bad value fails")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, "gRPC bad log setting: INVALID_ARGUMENT")
        q = pb.TraceSettingRequest(model_name="asr")
        q.settings["trace_level"].value.extend(["TIMESTAMPS", "TENSORS"])
        q.settings["trace_rate"].value.append("7")
        ts = stub.TraceSetting(q)
        check(list(ts.settings["trace_level"].value) == ["TIMESTAMPS", "TENSORS"] and
              list(ts.settings["trace_rate"].value) == ["7"] and
              list(ts.settings["trace_count"].value) == ["-1"],
              "gRPC TraceSetting for a model")
        g = stub.TraceSetting(pb.TraceSettingRequest())
        check(list(g.settings["trace_level"].value) == ["OFF"], "gRPC TraceSetting: global unchanged")

        key_g, obj_g = new_object(len(in_bytes))
        obj_g.buf[:len(in_bytes)] = in_bytes
        stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
            name="gin", key=key_g, offset=0, byte_size=len(in_bytes)))
        stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
            name="gout", key=key_out, offset=0, byte_size=4096))
        st = stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest())
        check(sorted(st.regions) == ["gin", "gout"] and st.regions["gin"].key == key_g and
              st.regions["gin"].byte_size == len(in_bytes), "gRPC SystemSharedMemoryStatus")
        req = pb.ModelInferRequest(model_name="asr")
        t = req.inputs.add(name="WAV", datatype="FP32", shape=list(wav.shape))
        t.parameters["shared_memory_region"].string_param = "gin"
        t.parameters["shared_memory_byte_size"].int64_param = len(in_bytes)
        req.inputs.add(name="WAV_LENS", datatype="INT32", shape=[1, 1])
        req.raw_input_contents.append(lens.tobytes())
        o = req.outputs.add(name="TRANSCRIPTS")
        o.parameters["shared_memory_region"].string_param = "gout"
        o.parameters["shared_memory_byte_size"].int64_param = 4096
        resp = stub.ModelInfer(req)
        n = resp.outputs[0].parameters["shared_memory_byte_size"].int64_param
        check(resp.outputs[0].parameters["shared_memory_region"].string_param == "gout" and
              len(resp.raw_output_contents) == 1 and resp.raw_output_contents[0] == b"" and
              texts_of(bytes(obj_out.buf[:n])) == [ref],
              "gRPC ModelInfer: input from gin, the transcript in gout")
        t.parameters["shared_memory_offset"].int64_param = 8
        try:
            stub.ModelInfer(req)
            check(False, "gRPC infer past a region's end fails")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "past its end" in e.details(),
                  "gRPC infer past a region's end: INVALID_ARGUMENT (%s)" % e.details())
        stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="gin"))
        st = stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest())
        check(sorted(st.regions) == ["gout"], "gRPC SystemSharedMemoryUnregister")
        try:
            stub.CudaSharedMemoryRegister(pb.CudaSharedMemoryRegisterRequest(name="c", byte_size=8))
            check(False, "gRPC CudaSharedMemoryRegister fails")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNIMPLEMENTED and "not supported" in e.details(),
                  "gRPC CudaSharedMemoryRegister: UNIMPLEMENTED, not supported")
        check(len(stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest()).regions) == 0,
              "gRPC CudaSharedMemoryStatus: none")
        # gout stays registered: the shutdown closes it
    code = srv.stop()
    check(code == 0, "the server stops cleanly with a region still registered (exit %s)" % code)
finally:
    srv.stop()

# ---- restricted APIs ------------------------------------------------------------------------
srv = Server(hark, repo, grpc=grpc is not None,
             args=["--http-restricted-api", "shared-memory,logging,trace:admin-key=pw",
                   "--grpc-restricted-protocol", "shared-memory,logging,trace:admin-key=pw"])
try:
    srv.wait_ready(120)
    ok = {"admin-key": "pw"}
    for method, path in (("GET", "/v2/logging"), ("POST", "/v2/logging"),
                         ("GET", "/v2/trace/setting"), ("GET", "/v2/models/asr/trace/setting"),
                         ("GET", "/v2/systemsharedmemory/status"),
                         ("POST", "/v2/systemsharedmemory/unregister"),
                         ("GET", "/v2/cudasharedmemory/status")):
        r = requests.request(method, srv.base + path, data=b"{}" if method == "POST" else None)
        r2 = requests.request(method, srv.base + path, data=b"{}" if method == "POST" else None,
                              headers=ok)
        check(r.status_code == 403 and "expecting header 'admin-key'" in err_of(r) and
              r2.status_code == 200,
              "restricted %s %s: 403 without the header, 200 with it (%d, %d)" %
              (method, path, r.status_code, r2.status_code))
    if grpc is not None:
        stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % srv.grpc_port))
        for name, req in (("LogSettings", pb.LogSettingsRequest()),
                          ("TraceSetting", pb.TraceSettingRequest()),
                          ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest())):
            try:
                getattr(stub, name)(req)
                check(False, "gRPC %s without the metadata is refused" % name)
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.UNAVAILABLE,
                      "gRPC %s without the metadata: UNAVAILABLE" % name)
            getattr(stub, name)(req, metadata=(("triton-grpc-protocol-admin-key", "pw"),))
            check(True, "gRPC %s with the metadata is served" % name)
finally:
    srv.stop()
    for m in regions:
        m.close()
        try:
            m.unlink()
        except FileNotFoundError:
            pass
    shutil.rmtree(tmp, ignore_errors=True)
check.exit()
