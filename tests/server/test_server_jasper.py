"""Integration test of `hark serve` with a Jasper model (run by tests/server/test_server_jasper.c):
a real server on loopback with DLE's converted J1 golden model under two names — one with the
generic WAV/WAV_LENS -> TRANSCRIPTS config, one with DLE's Triton ensemble config
(AUDIO_SIGNAL/NUM_SAMPLES -> TRANSCRIPT) — driven the way Triton's clients and DLE's
jasper-client.py drive it (KServe v2 binary tensors), plus OpenAI transcriptions and bad input.
Usage: test_server_jasper.py HARK_BIN MODEL_DIR GOLDEN_J1_DIR AUDIO_WAV_DIR. Exit 0 = pass."""
import json, os, shutil, sys, tempfile
import numpy as np
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server, texts_of, name_models  # noqa: E402

hark, model_dir, golden, wavs = sys.argv[1:5]
UTTS = ["utt0_lj-LJ001-0013-crop28037", "utt1_deepspeech-LDC93S1",
        "utt2_librivox-sense_and_sensibility_01_austen_64kb-0890", "utt3_jfk"]
RES = [json.load(open(os.path.join(golden, u, "result.json"))) for u in UTTS]
WAV = [np.load(os.path.join(golden, u, "waveform.npy")) for u in UTTS]
IDS = [np.load(os.path.join(golden, u, "greedy_ids.npy")) for u in UTTS]
LABELS = json.load(open(os.path.join(golden, "labels.json")))["symbols"]
BLANK = len(LABELS) - 1

tmp = tempfile.mkdtemp(prefix="hark-serve-jasper-")
repo = os.path.join(tmp, "repo")
os.makedirs(repo)
shutil.copytree(model_dir, os.path.join(repo, "jasper"))
dle = os.path.join(repo, "jasper-ts-trace-ensemble")  # the name jasper-client.py asks for
shutil.copytree(model_dir, dle)
with open(os.path.join(dle, "config.pbtxt"), "w") as f:  # as convert_jasper.py --triton-dle
    f.write('name: "jasper-ts-trace-ensemble"\nbackend: "hark"\nmax_batch_size: 8\n'
            'input [ { name: "AUDIO_SIGNAL" data_type: TYPE_FP16 dims: [ -1 ] },\n'
            '        { name: "NUM_SAMPLES" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'output [ { name: "TRANSCRIPT" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
            'dynamic_batching { }\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n'
            'parameters { key: "family" value { string_value: "jasper" } }\n')
name_models(repo)
srv = Server(hark, repo, args=["--http-threads", "1"])
base, log = srv.base, srv.log
check = Checks()


def collapse(ids):  # DLE's ctc_decoder_predictions_tensor
    out, prev = [], BLANK
    for p in ids:
        if p != BLANK and (p != prev or prev == BLANK):
            out.append(LABELS[p])
        prev = p
    return "".join(out)


infer = srv.infer


try:
    srv.wait_ready()

    # generic contract: one padded batch of the four utterances; hark's answer per utterance does
    # not depend on the batch, so it is DLE's batch-of-1 (inference.py --transcribe_wav) text
    N = max(len(w) for w in WAV)
    batch = np.zeros((4, N), dtype="<f4")
    for i, w in enumerate(WAV):
        batch[i, :len(w)] = w
    lens = np.array([[len(w)] for w in WAV], dtype="<i4")
    st, js, blob = infer("jasper", [("WAV", "FP32", batch), ("WAV_LENS", "INT32", lens)],
                         "TRANSCRIPTS")
    want = [r["text_inference_py"] for r in RES]
    got = texts_of(blob) if st == 200 else js
    check(st == 200 and got == want, f"WAV/WAV_LENS batch of 4 -> TRANSCRIPTS: DLE's texts ({got})")
    st, js, blob = infer("jasper", [("WAV", "FP32", batch), ("WAV_LENS", "INT32", lens)],
                         "TRANSCRIPTS", {"ctc_frames": "valid"})
    check(st == 200 and texts_of(blob) == [r["text_valid_frames"] for r in RES],
          "ctc_frames valid: DLE's valid-frame texts")

    # OpenAI transcriptions of the full recordings utt1 and utt3 are
    for u, f in ((1, "deepspeech-LDC93S1.wav"), (3, "jfk.wav")):
        with open(os.path.join(wavs, f), "rb") as fh:
            r = requests.post(base + "/v1/audio/transcriptions",
                              files={"file": (f, fh, "audio/wav")},
                              data={"model": "jasper", "response_format": "json"})
        check(r.status_code == 200 and r.json().get("text") == RES[u]["text_inference_py"],
              f"OpenAI transcription of {f}: {r.status_code} {r.text[:120]}")

    # DLE's Triton contract, as jasper-client.py reads the config and sends the request
    cfg = requests.get(base + "/v2/models/jasper-ts-trace-ensemble/config").json()
    check([i["name"] for i in cfg["input"]] == ["AUDIO_SIGNAL", "NUM_SAMPLES"] and
          cfg["input"][1]["data_type"] == "TYPE_INT32" and len(cfg["input"][0]["dims"]) == 1 and
          [o["name"] for o in cfg["output"]] == ["TRANSCRIPT"] and cfg["max_batch_size"] == 8,
          "DLE ensemble config: the names and types jasper-client.py checks")
    for u in range(4):
        a = WAV[u].astype("<f4").reshape(1, -1)
        st, js, blob = infer("jasper-ts-trace-ensemble",
                             [("AUDIO_SIGNAL", "FP32", a),
                              ("NUM_SAMPLES", "INT32", np.array([[a.shape[1]]], dtype="<i4"))],
                             "TRANSCRIPT")
        ids = np.frombuffer(blob, dtype="<i4") if st == 200 else None
        ok = (st == 200 and js["outputs"][0]["datatype"] == "INT32" and
              js["outputs"][0]["shape"] == [1, len(IDS[u])] and
              np.array_equal(ids, IDS[u].astype("<i4")))
        check(ok and collapse(ids) == RES[u]["text_inference_py"],
              f"AUDIO_SIGNAL FP32 -> TRANSCRIPT: DLE's greedy ids on all frames and its text "
              f"({UTTS[u]})")
    # jasper-client.py's own batch: FP16, every row padded with noise to the longest and
    # NUM_SAMPLES = that length for every row
    rng = np.random.default_rng(1)
    rows = [WAV[1], WAV[2]]
    L = max(len(w) for w in rows)
    sig = np.stack([np.concatenate([w, rng.normal(w.mean(), w.std(), L - len(w))]) for w in rows])
    st, js, blob = infer("jasper-ts-trace-ensemble",
                         [("AUDIO_SIGNAL", "FP16", sig.astype("<f2")),
                          ("NUM_SAMPLES", "INT32", np.array([[L], [L]], dtype="<i4"))],
                         "TRANSCRIPT")
    shp = js["outputs"][0]["shape"] if st == 200 else js
    ids = np.frombuffer(blob, dtype="<i4").reshape(2, -1) if st == 200 else None
    agree = float((ids[1] == IDS[2]).mean()) if st == 200 and ids.shape[1] == len(IDS[2]) else 0
    check(st == 200 and shp == [2, len(IDS[2])] and agree >= 0.9,
          f"jasper-client.py batch (FP16, noise padding): shape {shp}, the FP16-rounded utt2 row "
          f"agrees with DLE's FP32 ids on {agree:.1%} of its frames")
    # rows of different NUM_SAMPLES: the shorter row is padded with the blank
    a = np.zeros((2, len(WAV[3])), dtype="<f4")
    a[0, :len(WAV[0])] = WAV[0]
    a[1] = WAV[3]
    st, js, blob = infer("jasper-ts-trace-ensemble",
                         [("AUDIO_SIGNAL", "FP32", a),
                          ("NUM_SAMPLES", "INT32",
                           np.array([[len(WAV[0])], [len(WAV[3])]], dtype="<i4"))], "TRANSCRIPT")
    ids = np.frombuffer(blob, dtype="<i4").reshape(2, -1) if st == 200 else None
    n0 = len(IDS[0])
    check(st == 200 and ids.shape[1] == len(IDS[3]) and np.array_equal(ids[0, :n0], IDS[0]) and
          (ids[0, n0:] == BLANK).all() and np.array_equal(ids[1], IDS[3]),
          "rows of different NUM_SAMPLES: each row its own ids, the shorter padded with the blank")

    # bad input: a clear 400, and the server stays up
    bad = WAV[1].astype("<f4").reshape(1, -1).copy()
    bad[0, 100] = np.nan
    st, js, _ = infer("jasper-ts-trace-ensemble",
                      [("AUDIO_SIGNAL", "FP32", bad),
                       ("NUM_SAMPLES", "INT32", np.array([[bad.shape[1]]], dtype="<i4"))],
                      "TRANSCRIPT")
    check(st == 400 and "NaN" in js.get("error", ""), f"NaN audio: 400 ({js})")
    st, js, _ = infer("jasper-ts-trace-ensemble",
                      [("AUDIO_SIGNAL", "FP32", WAV[1].astype("<f4").reshape(1, -1)),
                       ("NUM_SAMPLES", "INT32", np.array([[0]], dtype="<i4"))], "TRANSCRIPT")
    check(st == 400 and "empty audio" in js.get("error", ""), f"empty audio: 400 ({js})")
    st, js, _ = infer("jasper", [("WAV", "FP32", np.zeros((1, 100), dtype="<f4")),
                                 ("WAV_LENS", "INT32", np.array([[100]], dtype="<i4"))],
                      "TRANSCRIPTS")
    check(st == 400 and "too short" in js.get("error", ""), f"100 samples: 400 ({js})")
    st, js, _ = infer("jasper-ts-trace-ensemble",
                      [("AUDIO_SIGNAL", "INT16", np.zeros((1, 1000), dtype="<i2")),
                       ("NUM_SAMPLES", "INT32", np.array([[1000]], dtype="<i4"))], "TRANSCRIPT")
    check(st == 400 and "FP32 or FP16" in js.get("error", ""), f"INT16 audio: 400 ({js})")
    st, js, _ = infer("jasper", [("WAV", "FP32", batch[:1]), ("WAV_LENS", "INT32", lens[:1])],
                      "TRANSCRIPTS", {"ctc_frames": "some"})
    check(st == 400 and "ctc_frames" in js.get("error", ""), f"bad ctc_frames: 400 ({js})")
    check(requests.get(base + "/v2/health/ready").status_code == 200, "still ready")
finally:
    srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)

if check.failures:
    print("".join(log[-30:]))
check.exit()
