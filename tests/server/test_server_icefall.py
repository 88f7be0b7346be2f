"""Integration test of `hark serve` with an icefall transducer (run by
tests/server/test_server_icefall.c): a real server on loopback with icefall's converted T1 golden
model under three names — the converter's config (greedy_search), one whose config.pbtxt picks
modified_beam_search and one with fast_beam_search and its beam / max_contexts / max_states —
driven with KServe v2 binary tensors (WAV/WAV_LENS -> TRANSCRIPTS, the sherpa/WeNet contract),
request parameters, OpenAI transcriptions and bad input. fast_beam_search has no golden here
(icefall's needs k2: tests/model/icefall/test_icefall_fast_beam.c compares the search with k2's);
the server must give what `hark transcribe --decoding-method fast_beam_search` gives.
Usage: test_server_icefall.py HARK_BIN MODEL_DIR GOLDEN_T1_DIR. Exit 0 = pass."""
import json, os, shutil, subprocess, sys, tempfile
import numpy as np
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harkserve import Checks, Server, texts_of, name_models  # noqa: E402

hark, model_dir, golden = sys.argv[1:4]
RES = json.load(open(os.path.join(golden, "results.json")))
UTTS = RES["batch"]["order"]
WAV = [np.load(os.path.join(golden, "goldens", u, "waveform.npy")) for u in UTTS]
GREEDY = [RES["utterances"][u]["greedy_search"]["text"] for u in UTTS]
BEAM = [RES["utterances"][u]["modified_beam_search"]["text"] for u in UTTS]

tmp = tempfile.mkdtemp(prefix="hark-serve-icefall-")
repo = os.path.join(tmp, "repo")
os.makedirs(repo)
shutil.copytree(model_dir, os.path.join(repo, "transducer"))  # sherpa's model name
mbs = os.path.join(repo, "transducer_mbs")
shutil.copytree(model_dir, mbs)
cfg = open(os.path.join(mbs, "config.pbtxt")).read()
cfg = cfg.replace('name: "m"', 'name: "transducer_mbs"').replace(
    'string_value: "greedy_search"', 'string_value: "modified_beam_search"')
open(os.path.join(mbs, "config.pbtxt"), "w").write(cfg)
fbs = os.path.join(repo, "transducer_fbs")  # fast_beam_search, pruning that bites, from config
shutil.copytree(model_dir, fbs)
cfg = open(os.path.join(fbs, "config.pbtxt")).read().replace(
    'string_value: "greedy_search"', 'string_value: "fast_beam_search"')
cfg += "".join('parameters { key: "%s" value { string_value: "%s" } }\n' % kv
               for kv in (("beam", "2"), ("max_contexts", "3"), ("max_states", "5")))
open(os.path.join(fbs, "config.pbtxt"), "w").write(cfg)
name_models(repo)


def transcribe_fast(wavs):
    """hark transcribe --decoding-method fast_beam_search (the model's 4, 4, 8): texts"""
    out = subprocess.run([hark, "transcribe", "--model", model_dir, "--decoding-method",
                          "fast_beam_search", "--format", "json", *wavs], capture_output=True,
                         text=True, check=True).stdout
    return [r["text"] for r in json.loads(out)]
srv = Server(hark, repo, args=["--http-threads", "1"])
base, log = srv.base, srv.log
check = Checks()


infer = srv.infer


try:
    srv.wait_ready()
    N = max(len(w) for w in WAV)
    batch = np.zeros((4, N), dtype="<f4")
    for i, w in enumerate(WAV):
        batch[i, :len(w)] = w
    lens = np.array([[len(w)] for w in WAV], dtype="<i4")
    ins = [("WAV", "FP32", batch), ("WAV_LENS", "INT32", lens)]
    st, js, blob = infer("transducer", ins, "TRANSCRIPTS")
    got = texts_of(blob) if st == 200 else js
    check(st == 200 and got == GREEDY, f"WAV/WAV_LENS batch of 4: icefall's greedy texts ({got})")
    st, js, blob = infer("transducer", ins, "TRANSCRIPTS",
                         {"decoding_method": "modified_beam_search", "beam_size": 4})
    got = texts_of(blob) if st == 200 else js
    check(st == 200 and got == BEAM, f"request decoding_method modified_beam_search ({got})")
    st, js, blob = infer("transducer_mbs", ins, "TRANSCRIPTS")
    got = texts_of(blob) if st == 200 else js
    check(st == 200 and got == BEAM, f"config.pbtxt decoding_method modified_beam_search ({got})")
    st, js, blob = infer("transducer_mbs", ins, "TRANSCRIPTS", {"decoding_method": "greedy_search"})
    check(st == 200 and texts_of(blob) == GREEDY, "the request's method over the config's")
    # sherpa's Triton client sends WAV as FP16 (its configs declare TYPE_FP16): the same texts as
    # the FP16-rounded audio gives through FP32
    b16 = batch.astype("<f2")
    st, js, blob = infer("transducer", [("WAV", "FP16", b16), ("WAV_LENS", "INT32", lens)],
                         "TRANSCRIPTS")
    st2, js2, blob2 = infer("transducer", [("WAV", "FP32", b16.astype("<f4")),
                                           ("WAV_LENS", "INT32", lens)], "TRANSCRIPTS")
    check(st == 200 and st2 == 200 and texts_of(blob) == texts_of(blob2),
          "WAV as FP16 = the same samples as FP32 (%s)" % ("ok" if st == 200 else js))

    wav = os.path.join(golden, "wavs", UTTS[2] + ".wav")
    with open(wav, "rb") as fh:
        r = requests.post(base + "/v1/audio/transcriptions",
                          files={"file": (os.path.basename(wav), fh, "audio/wav")},
                          data={"model": "transducer", "response_format": "json"})
    check(r.status_code == 200 and r.json().get("text") == GREEDY[2],
          f"OpenAI transcription: {r.status_code} {r.text[:120]}")

    fast = transcribe_fast([os.path.join(golden, "wavs", u + ".wav") for u in UTTS])
    st, js, blob = infer("transducer", ins, "TRANSCRIPTS", {"decoding_method": "fast_beam_search"})
    got = texts_of(blob) if st == 200 else js
    check(st == 200 and got == fast, f"request decoding_method fast_beam_search ({got} vs {fast})")
    # the request's beam / max_contexts / max_states = config.pbtxt's
    st, js, blob = infer("transducer_fbs", ins, "TRANSCRIPTS")
    st2, js2, blob2 = infer("transducer", ins, "TRANSCRIPTS",
                            {"decoding_method": "fast_beam_search", "beam": 2,
                             "max_contexts": 3, "max_states": 5})
    check(st == 200 and st2 == 200 and texts_of(blob) == texts_of(blob2),
          f"fast_beam_search options from config.pbtxt = from the request ({js} {js2})")
    st, js, blob = infer("transducer_fbs", ins, "TRANSCRIPTS",
                         {"beam": 4, "max_contexts": 4, "max_states": 8})
    check(st == 200 and texts_of(blob) == fast, "the request's options over the config's")
    st, js, _ = infer("transducer", ins, "TRANSCRIPTS",
                      {"decoding_method": "fast_beam_search_nbest"})
    check(st == 400 and "not implemented" in js.get("error", ""),
          f"fast_beam_search_nbest: 400 ({js})")
    st, js, _ = infer("transducer", ins, "TRANSCRIPTS",
                      {"decoding_method": "fast_beam_search", "max_states": 0})
    check(st == 400 and "max_states" in js.get("error", ""), f"max_states 0: 400 ({js})")
    st, js, _ = infer("transducer", ins, "TRANSCRIPTS", {"beam_size": 0})
    check(st == 400 and "beam_size must be in [1, 64]" in js.get("error", ""),
          f"beam_size 0: 400 ({js})")
    st, js, _ = infer("transducer", [("WAV", "FP32", np.zeros((1, 500), dtype="<f4")),
                                     ("WAV_LENS", "INT32", np.array([[500]], dtype="<i4"))],
                      "TRANSCRIPTS")
    check(st == 400 and "too short" in js.get("error", ""), f"500 samples: 400 ({js})")
    bad = batch[1:2].copy()
    bad[0, 100] = np.nan
    st, js, _ = infer("transducer", [("WAV", "FP32", bad), ("WAV_LENS", "INT32", lens[1:2])],
                      "TRANSCRIPTS")
    check(st == 400 and "NaN" in js.get("error", ""), f"NaN audio: 400 ({js})")
    check(requests.get(base + "/v2/health/ready").status_code == 200, "still ready")
finally:
    srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)
if check.failures:
    print("".join(log[-40:]))
check.exit()
