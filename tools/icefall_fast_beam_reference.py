#!/usr/bin/env python3
# icefall_fast_beam_reference.py — reference outputs of icefall's own fast_beam_search (one best,
# k2's trivial graph) run by the real k2, for hark's fast_beam_search to be checked against.
# Tests: tests/model/icefall/test_icefall_fast_beam.c (runs it when $HARK_K2_PYTHONPATH and
# $HARK_ICEFALL_SRC are set).
"""icefall's fast_beam_search_one_best with k2.trivial_graph(vocab_size - 1), run by real k2.

    icefall_fast_beam_reference.py --icefall-root SRC --k2-path PATHS --out DIR
        (--golden T1DIR [--utts a,b] | --checkpoint CKPT [model sizes] --fbank F.npy ... |
         --checkpoint CKPT [model sizes] --random-fbank FRAMES:SEED[:SCALE] ...)
        [--settings 4,4,8/1,2,3/...] [--shims ../shared/tools/icefall]

SRC is an icefall source tree (`icefall/` and `egs/librispeech/ASR/`; bench/icefall.sh
--prepare-ext extracts the commit the T1 goldens were made with into .ext/icefall). PATHS is
where `import k2` finds k2 built from source (os.pathsep-separated: k2's python package
directory k2/python and the build's lib directory holding _k2*.so; docs/model-format.md,
"fast_beam_search", gives the build). The import shims of ../shared/tools/icefall stand in for
lhotse, kaldifeat and the other packages icefall imports but never calls here; k2 is NOT stubbed:
this script makes the shims leave k2 to the real package.

The model is icefall's pruned_transducer_stateless3 built by the recipe's own
train.get_transducer_model: with --golden, the set's model_args.json params and pretrained.pt and
its goldens/<utt>/fbank.npy; with --checkpoint, the sizes given here (the flags of
tests/model/icefall/conformer_random_ckpt.py, whose state_dict icefall loads: only the pruned
loss's simple_am_proj / simple_lm_proj are absent, and unused by decoding; its kernel must be 31,
the only one the recipe builds) and the features of
--fbank files or --random-fbank (FRAMES x 80 standard-normal values from numpy's
default_rng(SEED), times SCALE, default 1).

For every utterance: icefall's model.encoder on the features (as pretrained.py calls it, one
utterance), then for every --settings entry BEAM,MAX_CONTEXTS,MAX_STATES (default 4,4,8,
pretrained.py's): beam_search.fast_beam_search (the lattice; with the arguments
fast_beam_search_one_best gives it, ilme_scale 0 among them), icefall.decode.one_best_decoding
(k2.shortest_path, double scores), icefall.utils.get_texts_with_timestamp; the best path's total
score from k2 (get_tot_scores, double, tropical); and beam_search.fast_beam_search_one_best itself,
whose tokens and timestamps must be the same (the script fails otherwise). Also the lattice's
numbers of states and arcs.

DIR receives <utt>/fbank.npy (the features), <utt>/encoder_out.npy (icefall's encoder output, so
a search can be checked on the very same input) and ref.json: {"k2": version info, "utts": {utt: {"encoder_out_len": T,
"encoder_out": path, "results": [{"beam", "max_contexts", "max_states", "tokens",
"timestamps", "score" (null when no path reached the end), "lattice_states",
"lattice_arcs"}]}}}.
"""

import argparse
import json
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

RECIPE = os.path.join("egs", "librispeech", "ASR", "pruned_transducer_stateless3")


def use_icefall(root, shims, k2_paths):
    """icefall's recipe importable with the real k2 (the shims for everything else)."""
    root = os.path.abspath(root)
    recipe = os.path.join(root, RECIPE)
    if not os.path.isfile(os.path.join(recipe, "beam_search.py")):
        sys.exit(f"icefall_fast_beam_reference: {recipe}/beam_search.py is not there "
                 f"(--icefall-root: an icefall source tree)")
    if not os.path.isfile(os.path.join(shims, "icefall_shims.py")):
        sys.exit(f"icefall_fast_beam_reference: {shims}/icefall_shims.py is not there")
    for p in reversed([p for p in k2_paths.split(os.pathsep) if p]):
        sys.path.insert(0, os.path.abspath(p))
    try:
        import k2  # noqa: F401  the real one, before any shim can stand in for it
    except ImportError as e:
        sys.exit(f"icefall_fast_beam_reference: cannot import k2 from --k2-path {k2_paths}: {e}")
    sys.path.insert(0, os.path.abspath(shims))
    import icefall_shims
    # The shims stub k2 with the rest; here k2 is real: leave it out of their prefixes (read by
    # their import finder at every import) before installing them.
    icefall_shims.STUB_PREFIXES = tuple(p for p in icefall_shims.STUB_PREFIXES if p != "k2")
    icefall_shims.install()
    import k2
    if "stub" in getattr(k2, "__file__", "<stub") or not hasattr(k2, "RnntDecodingStreams"):
        sys.exit("icefall_fast_beam_reference: k2 is a stub, not the real package")
    try:  # train.py, beam_search.py and icefall/utils.py import it; only BPE loading uses it
        import sentencepiece  # noqa: F401
    except ImportError:
        sp = types.ModuleType("sentencepiece")
        sp.SentencePieceProcessor = object
        sys.modules["sentencepiece"] = sp
    sys.path.insert(0, root)
    sys.path.insert(0, recipe)
    cwd = os.getcwd()
    os.chdir(recipe)
    try:
        import train
        import beam_search
        from icefall.decode import one_best_decoding
        from icefall.utils import get_texts_with_timestamp
    finally:
        os.chdir(cwd)
    real_env_info = train.get_env_info

    def env_info():  # get_params() records it; a host without a resolvable name must not stop us
        try:
            return real_env_info()
        except OSError as e:
            return {"env_info": f"unavailable: {e}"}
    train.get_env_info = env_info
    return k2, train, beam_search, one_best_decoding, get_texts_with_timestamp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--icefall-root", required=True)
    ap.add_argument("--k2-path", required=True,
                    help="where `import k2` finds the built k2 (os.pathsep-separated)")
    ap.add_argument("--shims", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                    "shared", "tools", "icefall"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--golden", help="a golden set (T1): model_args.json, pretrained.pt, "
                    "results.json, goldens/<utt>/fbank.npy")
    ap.add_argument("--utts", help="--golden: these utterances (comma-separated; default all)")
    ap.add_argument("--checkpoint", help="a pruned_transducer_stateless3 {'model': state_dict}")
    ap.add_argument("--fbank", action="append", default=[], help="features (T, 80) .npy")
    ap.add_argument("--random-fbank", action="append", default=[], metavar="FRAMES:SEED[:SCALE]")
    ap.add_argument("--settings", default="4,4,8",
                    help="BEAM,MAX_CONTEXTS,MAX_STATES entries separated by '/'")
    # --checkpoint's sizes (conformer_random_ckpt.py's flags and defaults)
    ap.add_argument("--encoder-dim", type=int, default=72)
    ap.add_argument("--nhead", type=int, default=3)
    ap.add_argument("--dim-feedforward", type=int, default=136)
    ap.add_argument("--num-encoder-layers", type=int, default=2)
    ap.add_argument("--cnn-module-kernel", type=int, default=31,
                    help="31 only: the recipe's get_encoder_model builds the Conformer's default")
    ap.add_argument("--decoder-dim", type=int, default=40)
    ap.add_argument("--joiner-dim", type=int, default=56)
    ap.add_argument("--context-size", type=int, default=2)
    ap.add_argument("--vocab-size", type=int, default=500)
    a = ap.parse_args()
    if a.cnn_module_kernel != 31:
        sys.exit("icefall_fast_beam_reference: --cnn-module-kernel must be 31 (the recipe's "
                 "train.get_encoder_model leaves the Conformer's default)")
    if bool(a.golden) == bool(a.checkpoint):
        sys.exit("icefall_fast_beam_reference: give one of --golden and --checkpoint")
    settings = []
    for s in a.settings.split("/"):
        b, c, st = s.split(",")
        settings.append((float(b), int(c), int(st)))

    k2, train, bs, one_best_decoding, get_texts_with_timestamp = use_icefall(
        a.icefall_root, a.shims, a.k2_path)
    import numpy as np
    import torch
    torch.set_num_threads(1)

    params = train.get_params()
    inputs = []  # (name, fbank array)
    if a.golden:
        params.update(json.load(open(os.path.join(a.golden, "model_args.json")))["params"])
        ckpt = os.path.join(a.golden, "pretrained.pt")
        utts = (a.utts.split(",") if a.utts else
                list(json.load(open(os.path.join(a.golden, "results.json")))["utterances"]))
        for u in utts:
            inputs.append((u, np.load(os.path.join(a.golden, "goldens", u, "fbank.npy"))))
    else:
        params.update(dict(feature_dim=80, encoder_dim=a.encoder_dim, nhead=a.nhead,
                           dim_feedforward=a.dim_feedforward,
                           num_encoder_layers=a.num_encoder_layers,
                           cnn_module_kernel=a.cnn_module_kernel, decoder_dim=a.decoder_dim,
                           joiner_dim=a.joiner_dim, context_size=a.context_size,
                           vocab_size=a.vocab_size, blank_id=0, dynamic_chunk_training=False,
                           short_chunk_size=25, num_left_chunks=4, causal_convolution=False))
        ckpt = a.checkpoint
        for p in a.fbank:
            inputs.append((os.path.splitext(os.path.basename(p))[0], np.load(p)))
        for r in a.random_fbank:
            f = r.split(":")
            frames, seed, scale = int(f[0]), int(f[1]), float(f[2]) if len(f) > 2 else 1.0
            x = (np.random.default_rng(seed).standard_normal((frames, 80)) * scale)
            inputs.append((f"random{frames}_{seed}", x.astype(np.float32)))
    if not inputs:
        sys.exit("icefall_fast_beam_reference: no utterances (--fbank, --random-fbank, --golden)")
    model = train.get_transducer_model(params, enable_giga=False)
    sd = torch.load(ckpt, map_location="cpu")["model"]
    missing, unexpected = model.load_state_dict(sd, strict=False)
    bad = [k for k in missing if not k.startswith(("simple_am_proj", "simple_lm_proj"))]
    if bad or unexpected:
        sys.exit(f"icefall_fast_beam_reference: {ckpt}: missing {bad}, unexpected {unexpected}")
    model.eval()
    vocab = params["vocab_size"]
    graph = k2.trivial_graph(vocab - 1, device=torch.device("cpu"))

    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    import k2.version.version as k2v
    # (k2's git fields name the repository its build sat in, not k2's commit: left out)
    ref = {"k2": {"file": k2.__file__, "version": str(k2v.__version__),
                  "build_type": str(k2v.__build_type__)},
           "vocab_size": vocab, "context_size": params["context_size"], "utts": {}}
    for name, feats in inputs:
        x = torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32))[None]
        with torch.no_grad():
            enc, enc_lens = model.encoder(x, torch.tensor([x.shape[1]]))
            os.makedirs(os.path.join(out, name), exist_ok=True)
            np.save(os.path.join(out, name, "fbank.npy"), x[0].numpy())
            np.save(os.path.join(out, name, "encoder_out.npy"), enc[0].numpy())
            results = []
            for beam, max_contexts, max_states in settings:
                kw = dict(model=model, decoding_graph=graph, encoder_out=enc,
                          encoder_out_lens=enc_lens, beam=beam, max_contexts=max_contexts,
                          max_states=max_states)
                # the arguments fast_beam_search_one_best passes: fast_beam_search's own
                # default ilme_scale is 0.1 (it then subtracts 0.1 x the decoder-only "internal
                # LM" log-probs), the one-best wrapper's 0
                lattice = bs.fast_beam_search(**kw, temperature=1.0, ilme_scale=0.0,
                                              allow_partial=False, blank_penalty=0.0)
                best = one_best_decoding(lattice)
                res = get_texts_with_timestamp(best)
                score = float(best.get_tot_scores(use_double_scores=True, log_semiring=False)[0])
                score = score if np.isfinite(score) else None  # no path: k2's empty lattice
                one = bs.fast_beam_search_one_best(**kw, return_timestamps=True)
                if one.hyps != res.hyps or one.timestamps != res.timestamps:
                    sys.exit(f"icefall_fast_beam_reference: {name} {beam},{max_contexts},"
                             f"{max_states}: fast_beam_search_one_best differs from its parts: "
                             f"{one.hyps} {one.timestamps} vs {res.hyps} {res.timestamps}")
                results.append({"beam": beam, "max_contexts": max_contexts,
                                "max_states": max_states, "tokens": list(res.hyps[0]),
                                "timestamps": list(res.timestamps[0]), "score": score,
                                "lattice_states": int(lattice.arcs.shape().tot_size(1)),
                                "lattice_arcs": int(lattice.num_arcs)})
        ref["utts"][name] = {"encoder_out_len": int(enc_lens[0]),
                             "encoder_out": os.path.join(name, "encoder_out.npy"),
                             "results": results}
        print(f"{name}: T' {int(enc_lens[0])}: " + ", ".join(
            f"{r['beam']:g}/{r['max_contexts']}/{r['max_states']}: {len(r['tokens'])} tokens"
            for r in results), flush=True)
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(ref, f)


if __name__ == "__main__":
    main()
