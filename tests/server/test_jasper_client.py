"""NVIDIA DeepLearningExamples' own Triton client for Jasper, triton/jasper-client.py, run
unmodified against a real `hark serve` (issue 18, Serving; run by
tests/server/test_jasper_client.c).

tritonclient is built from its sources with tools/tritonclient_from_source.sh; DLE's client runs
as a subprocess of /usr/bin/python3 with PYTHONPATH = that tree and tools/numpy_aliases (np.bool,
which DLE's speech_utils.py needs and numpy 1.24 removed). The J1 golden checkpoint is converted
with `convert_jasper.py --triton-dle` and served under the names the client asks for
(`jasper-<--model_platform>-ensemble`): jasper-onnx-ensemble as converted (AUDIO_SIGNAL
TYPE_FP16, DLE's fp16 repository) and jasper-ts-trace-ensemble with TYPE_FP32 (DLE's fp32
repository). The transcripts the client prints must equal `hark transcribe`'s of the same
samples: the WAV files for FP32 (for the golden set's two whole recordings also DLE's
inference.py texts); for FP16 float WAVs of the samples rounded to FP16, which the client sends
unchanged. DLE's `-i gRPC` path is run too (it stops in DLE's own parse_model, against Triton as
well: docs/serving.md), and the gRPC side of the contract is checked with tritonclient.grpc.
Usage: test_jasper_client.py HARK_BIN GOLDEN_J1_DIR AUDIO_WAV_DIR DLE_JASPER_DIR CLIENT_SRC
COMMON_SRC. Exit 0 = pass."""
import ast, json, os, re, shutil, subprocess, sys, tempfile
import numpy as np
import soundfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server  # noqa: E402

hark, golden, wavs, dle, client_src, common_src = sys.argv[1:7]
PY = "/usr/bin/python3"
ROOT = os.getcwd()
FILES = ["deepspeech-LDC93S1.wav", "sb-spk1_snt1.wav", "jfk.wav"]
LABELS = [" "] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["'"]  # + blank, as DLE's
BLANK = len(LABELS)

tmp = tempfile.mkdtemp(prefix="hark-jasper-client-")
check = Checks()
srv = None


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def transcribe(model, paths):
    """hark transcribe --format json: {path: text}"""
    r = run([hark, "transcribe", "--model", model, "--format", "json"] + paths)
    assert r.returncode == 0, r.stdout
    js = json.loads(r.stdout[r.stdout.index("["):])
    assert len(js) == len(paths), r.stdout
    return {p: j["text"] for p, j in zip(paths, js)}


def dle_client(platform, data_dir, url, protocol="HTTP"):
    """jasper-client.py as DLE's scripts/run_client.sh runs it, on every *.wav under data_dir;
    (exit status, {path: [texts]}, output)"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(tmp, "tc"), os.path.join(ROOT, "tools", "numpy_aliases")]))
    r = run([PY, os.path.join(dle, "triton", "jasper-client.py"), "--model_platform", platform,
             "-u", url, "-i", protocol, "--data_dir", os.path.dirname(data_dir),
             "--audio_filename", os.path.basename(data_dir)], env=env, timeout=300)
    got = {}
    for m in re.finditer(r"^File:  (.*)\nFinal transcript:  (\[.*\])$", r.stdout, re.M):
        got[m.group(1)] = ast.literal_eval(m.group(2))
    return r.returncode, got, r.stdout


try:
    # tritonclient from source
    r = run(["bash", "tools/tritonclient_from_source.sh", "--client", client_src, "--common",
             common_src, "--output", os.path.join(tmp, "tc")])
    check(r.returncode == 0, "tools/tritonclient_from_source.sh builds tritonclient: " +
          r.stdout.strip().splitlines()[-1])
    if r.returncode:
        print(r.stdout)
        check.exit()

    # the model, as converted for DLE's contract (FP16), and DLE's fp32 variant of its config
    repo = os.path.join(tmp, "repo")
    fp16 = os.path.join(repo, "jasper-onnx-ensemble")
    r = run([PY, "tools/convert_jasper.py", "--checkpoint",
             os.path.join(golden, "Jasper_epoch1_checkpoint.pt"), "--config",
             os.path.join(golden, "jasper10x5dr_speedp-online_speca_golden.yaml"),
             "--output", fp16, "--triton-dle", "--max-batch-size", "8"])
    assert r.returncode == 0, r.stdout
    fp32 = os.path.join(repo, "jasper-ts-trace-ensemble")
    shutil.copytree(fp16, fp32)
    cfg = open(os.path.join(fp16, "config.pbtxt")).read()
    check("TYPE_FP16" in cfg, "convert_jasper.py --triton-dle declares AUDIO_SIGNAL TYPE_FP16")
    cfg = cfg.replace('"jasper-onnx-ensemble"', '"jasper-ts-trace-ensemble"')
    open(os.path.join(fp32, "config.pbtxt"), "w").write(cfg.replace("TYPE_FP16", "TYPE_FP32"))

    # the audio: the WAV files (16 kHz mono PCM), and float WAVs of their samples in FP16
    d32, d16 = os.path.join(tmp, "wav32"), os.path.join(tmp, "wav16")
    os.makedirs(d32)
    os.makedirs(d16)
    for f in FILES:
        shutil.copy(os.path.join(wavs, f), d32)
        x, sr = soundfile.read(os.path.join(wavs, f), dtype="float32")
        soundfile.write(os.path.join(d16, f), x.astype(np.float16).astype(np.float32), sr,
                        subtype="FLOAT")
    p32 = [os.path.join(d32, f) for f in FILES]
    p16 = [os.path.join(d16, f) for f in FILES]
    want32, want16 = transcribe(fp32, p32), transcribe(fp16, p16)

    srv = Server(hark, repo, grpc=True)
    srv.wait_ready()
    http, grpc_url = "127.0.0.1:%d" % srv.port, "127.0.0.1:%d" % srv.grpc_port

    for platform, ddir, want, what in (("ts-trace", d32, want32, "FP32, the WAV files"),
                                       ("onnx", d16, want16, "FP16, the FP16-rounded samples")):
        rc, got, out = dle_client(platform, ddir, http)
        ok = rc == 0 and sorted(got) == sorted(want)
        for p in want:
            good = ok and got[p] == [want[p]]
            check(good, f"jasper-client.py --model_platform {platform} (HTTP, AUDIO_SIGNAL {what})"
                  f": {os.path.basename(p)} -> {got.get(p)} (hark transcribe: {want[p]!r})")
        if not ok:
            print(out[-3000:])
    # and those of the two whole recordings of the golden set are DLE's inference.py texts
    for f, u in (("deepspeech-LDC93S1.wav", "utt1_deepspeech-LDC93S1"), ("jfk.wav", "utt3_jfk")):
        dle_text = json.load(open(os.path.join(golden, u, "result.json")))["text_inference_py"]
        check(want32[os.path.join(d32, f)] == dle_text,
              f"{f}: the FP32 transcript is DLE's inference.py text (golden {u})")

    # DLE's gRPC path: parse_model reads config['input'] from tritonclient.grpc's
    # get_model_config(as_json=True), which is the ModelConfigResponse ({"config": {...}}) from
    # Triton as from hark, so it stops there; should DLE fix it, the transcripts must match
    rc, got, out = dle_client("ts-trace", d32, grpc_url, "gRPC")
    upstream = rc != 0 and re.search(r"in parse_model\n(?:.*\n){1,2}KeyError: 'input'\s*$", out)
    check(upstream or (rc == 0 and all(got.get(p) == [want32[p]] for p in want32)),
          "jasper-client.py -i gRPC: " + ("DLE's own KeyError 'input' in parse_model (Triton's "
                                          "ModelConfigResponse shape)" if upstream else
                                          f"exit {rc}, {got}"))
    if not upstream and rc != 0:
        print(out[-3000:])

    # the gRPC contract itself, with tritonclient.grpc as DLE's recognize() would use it
    sys.path.insert(0, os.path.join(tmp, "tc"))
    import tritonclient.grpc as tg

    c = tg.InferenceServerClient(url=grpc_url)
    cfg = c.get_model_config("jasper-onnx-ensemble", as_json=True)["config"]
    check([i["name"] for i in cfg["input"]] == ["AUDIO_SIGNAL", "NUM_SAMPLES"] and
          [i["data_type"] for i in cfg["input"]] == ["TYPE_FP16", "TYPE_INT32"] and
          [len(i["dims"]) for i in cfg["input"]] == [1, 1] and
          [(o["name"], o["data_type"]) for o in cfg["output"]] == [("TRANSCRIPT", "TYPE_INT32")]
          and int(cfg["max_batch_size"]) == 8, "tritonclient.grpc model config: DLE's contract")
    for p in p16:
        x = soundfile.read(p, dtype="float32")[0].astype(np.float16).reshape(1, -1)
        n = np.array([[x.shape[1]]], dtype=np.int32)
        ins = [tg.InferInput("AUDIO_SIGNAL", list(x.shape), "FP16"),
               tg.InferInput("NUM_SAMPLES", list(n.shape), "INT32")]
        ins[0].set_data_from_numpy(x)
        ins[1].set_data_from_numpy(n)
        res = c.infer("jasper-onnx-ensemble", ins,
                      outputs=[tg.InferRequestedOutput("TRANSCRIPT")])
        ids = res.as_numpy("TRANSCRIPT")
        text, prev = [], BLANK
        for k in ids.reshape(-1).tolist():  # DLE's ctc_decoder_predictions_tensor
            if k != BLANK and (k != prev or prev == BLANK):
                text.append(LABELS[k])
            prev = k
        check(ids.dtype == np.int32 and ids.shape[0] == 1 and "".join(text) == want16[p],
              f"tritonclient.grpc infer (FP16): {os.path.basename(p)} ids {ids.dtype} "
              f"{list(ids.shape)} collapse to hark transcribe's text")
    c.close()
finally:
    if srv:
        srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)

if check.failures and srv:
    print("".join(srv.log[-30:]))
check.exit()
