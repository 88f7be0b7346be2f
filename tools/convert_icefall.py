#!/usr/bin/env python3
# convert_icefall.py — turns an icefall pruned stateless transducer checkpoint (pretrained.pt as
# export.py writes it, or epoch-N.pt) + tokens.txt into a hark model directory
# (docs/model-format.md, "icefall transducers").
# Tests: tests/model/icefall/test_convert_icefall.c (runs this script on the golden checkpoint).
"""Convert an icefall pruned stateless transducer checkpoint into a hark model directory.

    convert_icefall.py --recipe pruned_transducer_stateless3 --checkpoint pretrained.pt
                       --tokens data/lang_bpe_500/tokens.txt --output DIR [model flags]

DIR receives a Triton-style model-repository entry:
    DIR/config.pbtxt          Triton model config (backend "hark", family "icefall_transducer")
    DIR/1/model.safetensors   the effective weights as float32, icefall's key names (the stored
                              log-scales folded in, see docs/model-format.md)
    DIR/1/model.json          the architecture read off the checkpoint, the front end, defaults
    DIR/1/tokens.txt          the token table

The model flags are the recipe's own, spelled as its pretrained.py takes them; those left out
take the recipe's defaults. The model sizes of pruned_transducer_stateless3 are not command-line
options in icefall (get_params()); they are read from the tensor shapes. Flags that change the
model in a way hark does not implement are refused by name; nothing is written unless every
check passes. Runs with Debian's /usr/bin/python3 (python3-torch, python3-numpy).
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np

from hark_entry import entry_name, fail, run_convert, write_entry

CONVERTER_VERSION = "1"
MODEL_JSON_VERSION = 1
FAMILY = "icefall_transducer"
RECIPES = ("pruned_transducer_stateless3", "zipformer")
METHODS = ("greedy_search", "modified_beam_search")
LOG_EPS_PAD = -23.025850929940457  # math.log(1e-10): icefall's batch padding of the features


def str2bool(v):
    """icefall.utils.str2bool"""
    if isinstance(v, bool):
        return v
    if v.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if v.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError("Boolean value expected.")


# ---- checkpoint --------------------------------------------------------------------------------

def load_state_dict(path):
    import torch
    try:
        ck = torch.load(path, map_location="cpu")
    except Exception as ex:  # torch raises many kinds for a bad file
        fail(f"{path}: cannot load the checkpoint: {ex}")
    if isinstance(ck, dict) and isinstance(ck.get("model"), dict):
        return ck["model"], "model"
    if isinstance(ck, dict) and ck and all(hasattr(v, "shape") for v in ck.values()):
        return ck, None
    fail(f"{path}: neither {{'model': state_dict}} (export.py / epoch-N.pt) nor a state dict")


def shape_of(sd, name, ndim=None):
    if name not in sd:
        fail(f"tensor {name}: missing from the checkpoint")
    s = tuple(sd[name].shape)
    if ndim is not None and len(s) != ndim:
        fail(f"tensor {name}: expected {ndim} dimensions, checkpoint has shape {list(s)}")
    return s


def conformer_arch(sd):
    """The sizes of a pruned_transducer_stateless3 model, read off its tensors."""
    d, flat = shape_of(sd, "encoder.encoder_embed.out.weight", 2)
    layers = set()
    for k in sd:
        m = re.match(r"encoder\.encoder\.layers\.(\d+)\.", k)
        if m:
            layers.add(int(m.group(1)))
    n_layers = len(layers)
    if n_layers == 0 or layers != set(range(n_layers)):
        fail(f"encoder layers {sorted(layers)}: expected 0 .. N-1 (is this a Conformer "
             "pruned_transducer_stateless3 checkpoint?)")
    nhead, dk = shape_of(sd, "encoder.encoder.layers.0.self_attn.pos_bias_u", 2)
    if nhead * dk != d:
        fail(f"pos_bias_u shape {[nhead, dk]}: heads x head_dim must equal encoder_dim {d}")
    ff = shape_of(sd, "encoder.encoder.layers.0.feed_forward.0.weight", 2)[0]
    kernel = shape_of(sd, "encoder.encoder.layers.0.conv_module.depthwise_conv.weight", 3)[2]
    vocab, dec_dim = shape_of(sd, "decoder.embedding.weight", 2)
    if "decoder.conv.weight" not in sd:
        fail("decoder.conv.weight: missing (context_size 1 models are not supported yet)")
    cs = shape_of(sd, "decoder.conv.weight", 3)[2]
    joiner = shape_of(sd, "joiner.encoder_proj.weight", 2)[0]
    feature_dim = 80
    w = ((feature_dim - 1) // 2 - 1) // 2
    if flat != 128 * w:
        fail(f"encoder.encoder_embed.out.weight: shape {[d, flat]}, expected [{d}, {128 * w}] "
             f"for {feature_dim} fbank bins (the recipe's feature_dim)")
    return {"feature_dim": feature_dim, "subsampling_factor": 4, "encoder_dim": d,
            "nhead": nhead, "dim_feedforward": ff, "num_encoder_layers": n_layers,
            "cnn_module_kernel": kernel, "decoder_dim": dec_dim, "context_size": cs,
            "joiner_dim": joiner, "vocab_size": vocab}


def expected_tensors(a):
    """{name: shape} of every stored tensor of the model (before folding)."""
    exp = {}
    d, ff, k, h = a["encoder_dim"], a["dim_feedforward"], a["cnn_module_kernel"], a["nhead"]

    def scaled(prefix, wshape, bias=True):
        exp[prefix + ".weight"] = wshape
        exp[prefix + ".weight_scale"] = ()
        if bias:
            exp[prefix + ".bias"] = (wshape[0],)
            exp[prefix + ".bias_scale"] = ()

    e = "encoder.encoder_embed"
    scaled(f"{e}.conv.0", (8, 1, 3, 3))
    scaled(f"{e}.conv.3", (32, 8, 3, 3))
    scaled(f"{e}.conv.6", (128, 32, 3, 3))
    w = ((a["feature_dim"] - 1) // 2 - 1) // 2
    scaled(f"{e}.out", (d, 128 * w))
    exp[f"{e}.out_norm.eps"] = ()
    for i in range(a["num_encoder_layers"]):
        p = f"encoder.encoder.layers.{i}"
        for u in ("u", "v"):
            exp[f"{p}.self_attn.pos_bias_{u}"] = (h, d // h)
            exp[f"{p}.self_attn.pos_bias_{u}_scale"] = ()
        scaled(f"{p}.self_attn.in_proj", (3 * d, d))
        scaled(f"{p}.self_attn.out_proj", (d, d))
        scaled(f"{p}.self_attn.linear_pos", (d, d), bias=False)
        for ffm in ("feed_forward", "feed_forward_macaron"):
            scaled(f"{p}.{ffm}.0", (ff, d))
            scaled(f"{p}.{ffm}.4", (d, ff))
        scaled(f"{p}.conv_module.pointwise_conv1", (2 * d, d, 1))
        scaled(f"{p}.conv_module.depthwise_conv", (d, 1, k))
        scaled(f"{p}.conv_module.pointwise_conv2", (d, d, 1))
        exp[f"{p}.norm_final.eps"] = ()
    D, J, V = a["decoder_dim"], a["joiner_dim"], a["vocab_size"]
    exp["decoder.embedding.weight"] = (V, D)
    exp["decoder.embedding.scale"] = ()
    scaled("decoder.conv", (D, 1, a["context_size"]), bias=False)
    scaled("joiner.encoder_proj", (J, d))
    scaled("joiner.decoder_proj", (J, D))
    scaled("joiner.output_linear", (V, J))
    return exp


TRAINING_ONLY = ("simple_am_proj.", "simple_lm_proj.")


def fold(sd, a):
    """Checks every tensor against the architecture, then returns {name: effective f32 array}:
    W = weight * exp(weight_scale), b = bias * exp(bias_scale), E = weight * exp(scale),
    u = pos_bias_u * exp(pos_bias_u_scale), BasicNorm eps -> exp(eps) — in torch float32, the
    same operations icefall's scaling.py runs, so the values are bit-identical."""
    import torch
    exp = expected_tensors(a)
    for name, t in sd.items():
        if name.startswith(TRAINING_ONLY):
            continue
        if name not in exp:
            fail(f"tensor {name}: unexpected in a pruned_transducer_stateless3 checkpoint "
                 f"(shape {list(t.shape)})")
    for name, shape in exp.items():
        if name not in sd:
            fail(f"tensor {name}: missing from the checkpoint (expected shape {list(shape)})")
        t = sd[name]
        if tuple(t.shape) != tuple(shape):
            fail(f"tensor {name}: expected shape {list(shape)}, checkpoint has {list(t.shape)}")
        if not t.is_floating_point():
            fail(f"tensor {name}: dtype {t.dtype} is not a floating-point type")
    out = {}
    with torch.no_grad():
        for name in exp:
            t = sd[name].detach().float()
            if name.endswith("_scale") or name == "decoder.embedding.scale":
                continue
            if name.endswith(".eps"):
                t = t.exp().reshape(1)
            elif name == "decoder.embedding.weight":
                t = t * sd["decoder.embedding.scale"].detach().float().exp()
            elif name.endswith(".pos_bias_u") or name.endswith(".pos_bias_v"):
                t = t * sd[name + "_scale"].detach().float().exp()
            elif name.endswith(".weight"):
                t = t * sd[name + "_scale"].detach().float().exp()
            elif name.endswith(".bias"):
                t = t * sd[name + "_scale"].detach().float().exp()
            arr = t.contiguous().numpy().astype("<f4", copy=False)
            if not np.all(np.isfinite(arr)):
                fail(f"tensor {name}: holds NaN or infinite values (after folding its scale)")
            out[name] = arr
    return out


# ---- tokens ------------------------------------------------------------------------------------

def check_tokens(path, vocab):
    """icefall's tokens.txt: "<sym> <id>" per line, ids 0..V-1 in order, <blk> = 0."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [ln.rstrip("\r\n") for ln in f if ln.strip()]
    except (OSError, UnicodeDecodeError) as ex:
        fail(f"{path}: cannot read the token table: {ex}")
    syms = []
    for i, ln in enumerate(lines):
        parts = ln.split()
        if len(parts) != 2 or not parts[1].isdigit() or int(parts[1]) != i:
            fail(f"{path}: line {i + 1} {ln!r}: expected '<symbol> {i}'")
        syms.append(parts[0])
    if len(syms) != vocab:
        fail(f"{path}: {len(syms)} tokens, but the model's vocabulary (rows of "
             f"joiner.output_linear.weight) is {vocab}")
    if syms[0] != "<blk>":
        fail(f"{path}: token 0 is {syms[0]!r}; icefall's blank <blk> must be 0")
    return syms


# ---- writers -----------------------------------------------------------------------------------

def config_pbtxt(name, max_batch, method, beam):
    preferred = sorted({max(1, max_batch // 2), max_batch})
    out = [f'name: "{name}"', 'backend: "hark"', f"max_batch_size: {max_batch}",
           "input [", "  {", '    name: "WAV"', "    data_type: TYPE_FP32", "    dims: [ -1 ]",
           "  },", "  {", '    name: "WAV_LENS"', "    data_type: TYPE_INT32", "    dims: [ 1 ]",
           "  }", "]", "output [", "  {", '    name: "TRANSCRIPTS"',
           "    data_type: TYPE_STRING", "    dims: [ 1 ]", "  }", "]",
           "dynamic_batching {", f"  preferred_batch_size: [ {', '.join(map(str, preferred))} ]",
           "  max_queue_delay_microseconds: 2000", "}",
           "instance_group [", "  {", "    count: 1", "    kind: KIND_CPU", "  }", "]",
           f'parameters {{ key: "family" value {{ string_value: "{FAMILY}" }} }}',
           f'parameters {{ key: "decoding_method" value {{ string_value: "{method}" }} }}',
           f'parameters {{ key: "beam_size" value {{ string_value: "{beam}" }} }}']
    return "\n".join(out) + "\n"


def convert(args):
    if args.recipe == "zipformer":
        fail("--recipe zipformer: not yet converted by hark (only pruned_transducer_stateless3 "
             "so far; issue #17)")
    if args.recipe not in RECIPES:
        fail(f"--recipe {args.recipe}: not an icefall recipe hark converts "
             f"({', '.join(RECIPES)})")
    if not 1 <= args.max_batch_size <= 512:
        fail(f"--max-batch-size {args.max_batch_size}: must be in [1, 512] (hark's limit)")
    if args.method not in METHODS:
        if args.method.startswith("fast_beam_search"):
            fail(f"--method {args.method}: not implemented in hark yet (greedy_search, "
                 "modified_beam_search)")
        fail(f"--method {args.method}: not one of {', '.join(METHODS)}")
    if args.sample_rate != 16000:
        fail(f"--sample-rate {args.sample_rate}: the recipe's features are 16000 Hz (hark "
             "resamples the audio itself)")
    if args.max_sym_per_frame != 1:
        fail(f"--max-sym-per-frame {args.max_sym_per_frame}: hark decodes at most one symbol "
             "per frame (icefall's greedy_search_batch); only 1 is supported")
    if not 1 <= args.beam_size <= 64:
        fail(f"--beam-size {args.beam_size}: must be in [1, 64]")
    if args.simulate_streaming and not args.causal_convolution:
        fail("--simulate-streaming True needs --causal-convolution True (as icefall's "
             "pretrained.py asserts)")
    if args.simulate_streaming and args.decode_chunk_size == 0:
        fail("--decode-chunk-size 0: must be >= 1 (or < 0 for full attention)")
    if (args.simulate_streaming and args.decode_chunk_size > 0 and args.left_context >= 0 and
            args.left_context % args.decode_chunk_size):
        fail(f"--left-context {args.left_context} must be a multiple of --decode-chunk-size "
             f"{args.decode_chunk_size} (icefall asserts it)")
    if args.dynamic_chunk_training and not args.causal_convolution:
        fail("--dynamic-chunk-training True needs --causal-convolution True (icefall asserts it)")
    if args.dynamic_chunk_training:
        fail("--dynamic-chunk-training True: not supported yet (icefall's offline encoder then "
             "masks attention with a chunk size drawn at random on every call; hark has no "
             "chunk-masked Conformer decoding yet)")
    if not os.path.isfile(args.tokens):
        fail(f"--tokens {args.tokens}: no such file")

    sd, key = load_state_dict(args.checkpoint)
    arch = conformer_arch(sd)
    if args.context_size != arch["context_size"]:
        fail(f"--context-size {args.context_size}: the checkpoint's decoder.conv.weight has "
             f"kernel {arch['context_size']}")
    tensors = fold(sd, arch)
    syms = check_tokens(args.tokens, arch["vocab_size"])

    name = entry_name(args.output, fail)
    model_json = {
        "format_version": MODEL_JSON_VERSION,
        "family": FAMILY,
        "recipe": args.recipe,
        "encoder": {"type": "conformer", **{k: arch[k] for k in (
            "feature_dim", "subsampling_factor", "encoder_dim", "nhead", "dim_feedforward",
            "num_encoder_layers", "cnn_module_kernel")},
            "causal_convolution": bool(args.causal_convolution)},
        "decoder": {"decoder_dim": arch["decoder_dim"], "context_size": arch["context_size"],
                    "vocab_size": arch["vocab_size"], "blank_id": 0},
        "joiner": {"joiner_dim": arch["joiner_dim"]},
        "features": {"type": "kaldi-fbank", "sample_rate": 16000, "num_mel_bins": 80,
                     "frame_length_ms": 25, "frame_shift_ms": 10, "dither": 0.0,
                     "snip_edges": False, "low_freq": 20, "high_freq": -400,
                     "pad_value": LOG_EPS_PAD},
        "decoding": {"method": args.method, "beam_size": args.beam_size,
                     "max_sym_per_frame": 1, "beam": args.beam,
                     "max_contexts": args.max_contexts, "max_states": args.max_states,
                     "simulate_streaming": bool(args.simulate_streaming),
                     "decode_chunk_size": args.decode_chunk_size,
                     "left_context": args.left_context},
        "tokens": "tokens.txt",
        "unk_id": syms.index("<unk>") if "<unk>" in syms else -1,
        "training": {"dynamic_chunk_training": args.dynamic_chunk_training,
                     "short_chunk_size": args.short_chunk_size,
                     "num_left_chunks": args.num_left_chunks},
    }
    meta = {"format": "hark", "family": FAMILY, "converter": "tools/convert_icefall.py",
            "converter_version": CONVERTER_VERSION, "recipe": args.recipe,
            "source": os.path.basename(args.checkpoint), "state_dict": key or "(bare)"}
    out = write_entry(args.output, tensors, meta, model_json,
                      config_pbtxt(name, args.max_batch_size, args.method, args.beam_size),
                      copies={"1/tokens.txt": args.tokens})
    n = sum(a.size for a in tensors.values())
    print(f"wrote {out}: {args.recipe}, {arch['num_encoder_layers']} layers, d "
          f"{arch['encoder_dim']}, vocab {arch['vocab_size']}, {len(tensors)} tensors, {n} values")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", required=True, help="pruned_transducer_stateless3 | zipformer")
    ap.add_argument("--checkpoint", required=True, help="pretrained.pt or epoch-N.pt")
    ap.add_argument("--tokens", required=True, help="tokens.txt ('<sym> <id>' per line)")
    ap.add_argument("--output", required=True, help="model directory to write")
    ap.add_argument("--bpe-model", default=None, help="accepted for icefall's older scripts; "
                    "unused (the text comes from --tokens)")
    # pretrained.py's own flags (icefall's defaults)
    ap.add_argument("--method", default="greedy_search",
                    help="default decoding method: greedy_search | modified_beam_search")
    ap.add_argument("--sample-rate", type=int, default=16000)
    ap.add_argument("--beam-size", type=int, default=4, help="modified_beam_search width")
    ap.add_argument("--beam", type=float, default=4, help="fast_beam_search (recorded only)")
    ap.add_argument("--max-contexts", type=int, default=4, help="fast_beam_search (recorded)")
    ap.add_argument("--max-states", type=int, default=8, help="fast_beam_search (recorded)")
    ap.add_argument("--context-size", type=int, default=2)
    ap.add_argument("--max-sym-per-frame", type=int, default=1)
    ap.add_argument("--simulate-streaming", type=str2bool, default=False)
    ap.add_argument("--decode-chunk-size", type=int, default=16)
    ap.add_argument("--left-context", type=int, default=64)
    # train.py's add_model_arguments (pruned_transducer_stateless3)
    ap.add_argument("--dynamic-chunk-training", type=str2bool, default=False)
    ap.add_argument("--causal-convolution", type=str2bool, default=False)
    ap.add_argument("--short-chunk-size", type=int, default=25)
    ap.add_argument("--num-left-chunks", type=int, default=4)
    # hark's
    ap.add_argument("--max-batch-size", type=int, default=64,
                    help="config.pbtxt max_batch_size (preferred sizes: half of it and it)")
    args = ap.parse_args(argv)
    return run_convert("convert_icefall", convert, args)


if __name__ == "__main__":
    sys.exit(main())
