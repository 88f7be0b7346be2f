#!/usr/bin/env python3
# convert_icefall.py — turns an icefall pruned stateless transducer checkpoint (pretrained.pt as
# export.py writes it, or epoch-N.pt) + tokens.txt into a hark model directory
# (docs/model-format.md, "icefall transducers").
# Tests: tests/model/icefall/test_icefall_family.c (icefall_convert_errors),
# tests/model/icefall/test_icefall_zipformer.c, tests/model/icefall/test_icefall_config.c.
"""Convert an icefall pruned stateless transducer checkpoint into a hark model directory.

    convert_icefall.py --recipe pruned_transducer_stateless3|zipformer --checkpoint pretrained.pt
                       --tokens data/lang_bpe_500/tokens.txt --output DIR [model flags]

DIR receives a Triton-style model-repository entry:
    DIR/config.pbtxt          Triton model config (backend "hark", family "icefall_transducer";
                              with --streaming N, a causal zipformer's sequence_batching)
    DIR/1/model.safetensors   the effective weights as float32, icefall's key names (the stored
                              log-scales folded in, see docs/model-format.md)
    DIR/1/model.json          the architecture read off the checkpoint, the front end, defaults
    DIR/1/tokens.txt          the token table

The model flags are the recipe's own, spelled as its pretrained.py takes them; those left out
take the recipe's defaults. The model sizes of pruned_transducer_stateless3 are not command-line
options in icefall (get_params()); they are read from the tensor shapes. The zipformer's are
(train.py's add_model_arguments: --num-encoder-layers 2,2,3,4,3,2 --encoder-dim ... ); the
checkpoint's tensors are checked against the shapes they give. Flags that change the
model in a way hark does not implement are refused by name; nothing is written unless every
check passes. Runs with Debian's /usr/bin/python3 (python3-torch, python3-numpy).
"""

import argparse
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np

from hark_entry import entry_name, fail, run_convert, sequence_batching, write_entry

CONVERTER_VERSION = "1"
MODEL_JSON_VERSION = 1
FAMILY = "icefall_transducer"
RECIPES = ("pruned_transducer_stateless3", "zipformer")
METHODS = ("greedy_search", "modified_beam_search", "fast_beam_search")
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


# ---- zipformer (Zipformer2) -------------------------------------------------------------------

ZF_PER_STACK = ("num_encoder_layers", "feedforward_dim", "num_heads", "encoder_dim",
                "query_head_dim", "value_head_dim", "pos_head_dim", "encoder_unmasked_dim",
                "cnn_module_kernel")
ZF_TRAINING_ONLY = ("simple_am_proj.", "simple_lm_proj.", "ctc_output.", "attention_decoder.")


def int_list(flag, s):
    """icefall's _to_int_tuple: "a,b,c" -> (a, b, c)"""
    try:
        return tuple(int(x) for x in str(s).split(","))
    except ValueError:
        fail(f"{flag} {s}: expected comma-separated integers")


def zipformer_arch(args):
    """The Zipformer2 configuration the flags give, as icefall's Zipformer2 expands it (a single
    value is repeated over the stacks, else one per stack), checked as icefall asserts."""
    ds = int_list("--downsampling-factor", args.downsampling_factor)
    n = len(ds)
    if not 1 <= n <= 16:
        fail(f"--downsampling-factor {args.downsampling_factor}: 1 to 16 stacks")
    a = {"downsampling_factor": list(ds)}
    for key in ZF_PER_STACK:
        flag = "--" + key.replace("_", "-")
        v = int_list(flag, getattr(args, key))
        if len(v) == 1:
            v = v * n
        elif len(v) != n:
            fail(f"{flag} {getattr(args, key)}: {len(v)} values for {n} stacks "
                 f"(--downsampling-factor {args.downsampling_factor})")
        if any(x < 1 for x in v):
            fail(f"{flag} {getattr(args, key)}: every value must be >= 1")
        a[key] = list(v)
    if any(x < 1 or x > 64 for x in ds):
        fail(f"--downsampling-factor {args.downsampling_factor}: factors must be in [1, 64]")
    for i in range(n):
        if a["encoder_unmasked_dim"][i] > a["encoder_dim"][i]:
            fail(f"--encoder-unmasked-dim {args.encoder_unmasked_dim}: stack {i} has "
                 f"{a['encoder_unmasked_dim'][i]} > its encoder dim {a['encoder_dim'][i]} "
                 "(icefall asserts it)")
        if a["cnn_module_kernel"][i] % 2 == 0:
            fail(f"--cnn-module-kernel {args.cnn_module_kernel}: kernels must be odd "
                 "(icefall asserts it)")
    if args.pos_dim < 2 or args.pos_dim % 2:
        fail(f"--pos-dim {args.pos_dim}: must be even and >= 2 (icefall asserts it)")
    a["pos_dim"] = args.pos_dim
    a["feature_dim"] = 80
    a["subsampling_factor"] = 4
    a["output_downsampling_factor"] = 2
    a["causal"] = bool(args.causal)
    a["chunk_size"] = list(int_list("--chunk-size", args.chunk_size))
    a["left_context_frames"] = list(int_list("--left-context-frames", args.left_context_frames))
    return a


def zipformer_chunks(a, args):
    """A causal model decodes with one chunk size and one left context (icefall draws them at
    random from the lists on every call, even in eval; its exported models take one each), and
    they must pass icefall's assertions."""
    for key, flag in (("chunk_size", "--chunk-size"), ("left_context_frames",
                                                       "--left-context-frames")):
        if len(a[key]) != 1:
            fail(f"{flag} {getattr(args, key)}: a causal model decodes with one value (icefall "
                 "draws one at random from a list on every call); pass one, e.g. "
                 f"{flag} {a[key][0]}")
    cs, lcf = a["chunk_size"][0], a["left_context_frames"][0]
    if cs == 0 or cs < -1:
        fail(f"--chunk-size {cs}: must be >= 1 (frames at 50 Hz) or -1 (no chunking)")
    if lcf == 0 or lcf < -1:
        fail(f"--left-context-frames {lcf}: must be >= 1 or -1 (unlimited)")
    if cs > 0:
        for i, ds in enumerate(a["downsampling_factor"]):
            if cs % ds:
                fail(f"--chunk-size {cs}: not a multiple of stack {i}'s downsampling factor {ds} "
                     "(icefall asserts it)")
        if lcf > 0:
            lc = max(lcf // cs, 1)
            for i, ds in enumerate(a["downsampling_factor"]):
                if cs * lc < (a["cnn_module_kernel"][i] // 2) * ds:
                    fail(f"--left-context-frames {lcf}: {lc} left chunks of {cs} frames are "
                         f"fewer than stack {i}'s convolution needs "
                         f"({a['cnn_module_kernel'][i] // 2} x {ds}; icefall asserts it)")


def zipformer_expected(a, D, J, V, cs):
    """{name: shape} of every tensor a zipformer transducer's state dict holds (icefall's names,
    before folding), and the names hark drops (read by icefall but unused at inference)."""
    exp, unused = {}, set()

    def lin(prefix, out, inp, bias=True):
        exp[prefix + ".weight"] = (out, inp)
        if bias:
            exp[prefix + ".bias"] = (out,)

    e = "encoder_embed"
    for i, (co, ci) in zip((0, 4, 7), ((8, 1), (32, 8), (128, 32))):
        exp[f"{e}.conv.{i}.weight"] = (co, ci, 3, 3)
        exp[f"{e}.conv.{i}.bias"] = (co,)
    exp[f"{e}.convnext.depthwise_conv.weight"] = (128, 1, 7, 7)
    exp[f"{e}.convnext.depthwise_conv.bias"] = (128,)
    exp[f"{e}.convnext.pointwise_conv1.weight"] = (384, 128, 1, 1)
    exp[f"{e}.convnext.pointwise_conv1.bias"] = (384,)
    exp[f"{e}.convnext.pointwise_conv2.weight"] = (128, 384, 1, 1)
    exp[f"{e}.convnext.pointwise_conv2.bias"] = (128,)
    w = ((a["feature_dim"] - 1) // 2 - 1) // 2
    d0 = a["encoder_dim"][0]
    lin(f"{e}.out", d0, 128 * w)
    exp[f"{e}.out_norm.log_scale"] = ()
    exp[f"{e}.out_norm.bias"] = (d0,)
    for s, ds in enumerate(a["downsampling_factor"]):
        d, H = a["encoder_dim"][s], a["num_heads"][s]
        qd, vd, pd = a["query_head_dim"][s], a["value_head_dim"][s], a["pos_head_dim"][s]
        ff, k = a["feedforward_dim"][s], a["cnn_module_kernel"][s]
        st = f"encoder.encoders.{s}"
        p = st if ds == 1 else st + ".encoder"
        if ds != 1:
            exp[f"{st}.downsample.bias"] = (ds,)
            exp[f"{st}.out_combiner.bypass_scale"] = (d,)
        for j in range(a["num_encoder_layers"][s]):
            L = f"{p}.layers.{j}"
            exp[f"{L}.bypass_scale"] = (d,)
            unused.add(f"{L}.bypass_scale")  # "TODO: remove it" in icefall: never read
            exp[f"{L}.bypass.bypass_scale"] = (d,)
            exp[f"{L}.bypass_mid.bypass_scale"] = (d,)
            lin(f"{L}.self_attn_weights.in_proj", (2 * qd + pd) * H, d)
            lin(f"{L}.self_attn_weights.linear_pos", H * pd, a["pos_dim"], bias=False)
            for m in ("self_attn1", "self_attn2"):
                lin(f"{L}.{m}.in_proj", H * vd, d)
                lin(f"{L}.{m}.out_proj", d, H * vd)
            for m, f in (("feed_forward1", ff * 3 // 4), ("feed_forward2", ff),
                         ("feed_forward3", ff * 5 // 4)):
                lin(f"{L}.{m}.in_proj", f, d)
                lin(f"{L}.{m}.out_proj", d, f)
            hid = 3 * d // 4
            lin(f"{L}.nonlin_attention.in_proj", 3 * hid, d)
            lin(f"{L}.nonlin_attention.out_proj", d, hid)
            for m in ("conv_module1", "conv_module2"):
                lin(f"{L}.{m}.in_proj", 2 * d, d)
                if a["causal"]:
                    c = f"{L}.{m}.depthwise_conv"
                    exp[f"{c}.causal_conv.weight"] = (d, 1, (k + 1) // 2)
                    exp[f"{c}.causal_conv.bias"] = (d,)
                    exp[f"{c}.chunkwise_conv.weight"] = (d, 1, k)
                    exp[f"{c}.chunkwise_conv.bias"] = (d,)
                    exp[f"{c}.chunkwise_conv_scale"] = (2, d, k)
                else:
                    exp[f"{L}.{m}.depthwise_conv.weight"] = (d, 1, k)
                    exp[f"{L}.{m}.depthwise_conv.bias"] = (d,)
                lin(f"{L}.{m}.out_proj", d, d)
            exp[f"{L}.norm.log_scale"] = ()
            exp[f"{L}.norm.bias"] = (d,)
    exp["encoder.downsample_output.bias"] = (a["output_downsampling_factor"],)
    exp["decoder.embedding.weight"] = (V, D)
    if cs > 1:
        exp["decoder.conv.weight"] = (D, 4, cs)
    lin("joiner.encoder_proj", J, max(a["encoder_dim"]))
    lin("joiner.decoder_proj", J, D)
    lin("joiner.output_linear", V, J)
    return exp, unused


def zipformer_fold(sd, exp, unused):
    """Checks every tensor against the configuration, then returns {name: f32 array}: the
    stored values, except BiasNorm's log_scale (-> "scale" = exp(log_scale)) and
    SimpleDownsample's bias (-> "weights" = softmax(bias)), computed in torch float32 as icefall
    does at run time; the never-read layer bypass_scale is dropped."""
    import torch
    for name, t in sd.items():
        if name.startswith(ZF_TRAINING_ONLY):
            continue
        if name not in exp:
            hint = ""
            if "causal_conv" in name or "chunkwise_conv" in name:
                hint = " (a causal model: pass --causal True)"
            elif ".depthwise_conv.weight" in name and "conv_module" in name:
                hint = " (a non-causal model: pass --causal False)"
            fail(f"tensor {name}: unexpected in a zipformer checkpoint of this configuration "
                 f"(shape {list(t.shape)}){hint}")
    for name, shape in exp.items():
        if name not in sd:
            fail(f"tensor {name}: missing from the checkpoint (expected shape {list(shape)}; "
                 "are the model flags those the model was trained with?)")
        t = sd[name]
        if tuple(t.shape) != tuple(shape):
            fail(f"tensor {name}: expected shape {list(shape)} from the model flags, checkpoint "
                 f"has {list(t.shape)}")
        if not t.is_floating_point():
            fail(f"tensor {name}: dtype {t.dtype} is not a floating-point type")
    out = {}
    with torch.no_grad():
        for name in exp:
            if name in unused:
                continue
            t = sd[name].detach().float()
            if name.endswith(".log_scale"):
                name = name[:-len("log_scale")] + "scale"
                t = t.exp().reshape(1)
            elif name.endswith("downsample.bias") or name == "encoder.downsample_output.bias":
                name = name[:-len("bias")] + "weights"
                t = t.softmax(dim=0)
            arr = t.contiguous().numpy().astype("<f4", copy=False)
            if not np.all(np.isfinite(arr)):
                fail(f"tensor {name}: holds NaN or infinite values")
            out[name] = arr
    return out


def convert_zipformer(args):
    if not args.use_transducer:
        fail("--use-transducer False: hark runs the transducer head only (a CTC-only zipformer "
             "is not supported)")
    if args.context_size < 1 or args.context_size > 16:
        fail(f"--context-size {args.context_size}: must be in [1, 16]")
    if args.context_size == 1:
        fail("--context-size 1: not supported yet (the decoder then has no conv)")
    if args.decoder_dim < 4 or args.decoder_dim % 4:
        fail(f"--decoder-dim {args.decoder_dim}: must be a multiple of 4 (the decoder conv's "
             "groups of 4 channels)")
    a = zipformer_arch(args)
    if a["causal"]:
        zipformer_chunks(a, args)
    if args.streaming:
        cs, lcf = a["chunk_size"][0], a["left_context_frames"][0]
        if not a["causal"] or cs <= 0 or lcf <= 0:
            fail(f"--streaming {args.streaming}: only a causal zipformer with one --chunk-size "
                 "> 0 and a --left-context-frames > 0 streams (pass --causal True --chunk-size "
                 "16 --left-context-frames 128, as the model was trained)")
        for i, ds in enumerate(a["downsampling_factor"]):
            if lcf % ds:
                fail(f"--left-context-frames {lcf}: not a multiple of stack {i}'s downsampling "
                     f"factor {ds}; streaming keeps left_context_frames / {ds} frames there")
    sd, key = load_state_dict(args.checkpoint)
    if "encoder_embed.convnext.depthwise_conv.weight" not in sd:
        fail(f"{args.checkpoint}: not a zipformer checkpoint (no "
             "encoder_embed.convnext.depthwise_conv.weight)")
    V = shape_of(sd, "decoder.embedding.weight", 2)[0]
    exp, unused = zipformer_expected(a, args.decoder_dim, args.joiner_dim, V, args.context_size)
    if "decoder.conv.weight" in sd and args.context_size > 1:
        k = shape_of(sd, "decoder.conv.weight", 3)[2]
        if k != args.context_size:
            fail(f"--context-size {args.context_size}: the checkpoint's decoder.conv.weight has "
                 f"kernel {k}")
    tensors = zipformer_fold(sd, exp, unused)
    syms = check_tokens(args.tokens, V)

    name = entry_name(args.output, fail)
    enc = {"type": "zipformer2"}
    for k in ("feature_dim", "subsampling_factor", "output_downsampling_factor",
              "num_encoder_layers", "downsampling_factor", "feedforward_dim", "num_heads",
              "encoder_dim", "query_head_dim", "value_head_dim", "pos_head_dim", "pos_dim",
              "encoder_unmasked_dim", "cnn_module_kernel", "causal", "chunk_size",
              "left_context_frames"):
        enc[k] = a[k]
    model_json = {
        "format_version": MODEL_JSON_VERSION,
        "family": FAMILY,
        "recipe": "zipformer",
        "encoder": enc,
        "decoder": {"decoder_dim": args.decoder_dim, "context_size": args.context_size,
                    "vocab_size": V, "blank_id": 0, "conv_group_size": 4},
        "joiner": {"joiner_dim": args.joiner_dim},
        "features": {"type": "kaldi-fbank", "sample_rate": 16000, "num_mel_bins": 80,
                     "frame_length_ms": 25, "frame_shift_ms": 10, "dither": 0.0,
                     "snip_edges": False, "low_freq": 20, "high_freq": -400,
                     "pad_value": LOG_EPS_PAD},
        "decoding": {"method": args.method, "beam_size": args.beam_size,
                     "max_sym_per_frame": 1, "beam": args.beam,
                     "max_contexts": args.max_contexts, "max_states": args.max_states},
        "tokens": "tokens.txt",
        "unk_id": syms.index("<unk>") if "<unk>" in syms else -1,
        "training": {"use_ctc": bool(args.use_ctc),
                     "use_attention_decoder": bool(args.use_attention_decoder)},
    }
    meta = {"format": "hark", "family": FAMILY, "converter": "tools/convert_icefall.py",
            "converter_version": CONVERTER_VERSION, "recipe": "zipformer",
            "source": os.path.basename(args.checkpoint), "state_dict": key or "(bare)"}
    out = write_entry(args.output, tensors, meta, model_json,
                      config_pbtxt(name, args.max_batch_size, args.method, args.beam_size,
                                   args.streaming, fast_beam_of(args)),
                      copies={"1/tokens.txt": args.tokens})
    n = sum(x.size for x in tensors.values())
    print(f"wrote {out}: zipformer, {len(a['downsampling_factor'])} stacks "
          f"({sum(a['num_encoder_layers'])} layers), encoder_dim {a['encoder_dim']}, vocab {V}, "
          f"{len(tensors)} tensors, {n} values")


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

def fast_beam_of(args):
    return (args.beam, args.max_contexts, args.max_states)


def config_pbtxt(name, max_batch, method, beam, max_sequences=0, fast_beam=None):
    preferred = sorted({max(1, max_batch // 2), max_batch})
    out = [f'name: "{name}"', 'backend: "hark"', f"max_batch_size: {max_batch}",
           "input [", "  {", '    name: "WAV"', "    data_type: TYPE_FP32", "    dims: [ -1 ]",
           "  },", "  {", '    name: "WAV_LENS"', "    data_type: TYPE_INT32", "    dims: [ 1 ]",
           "  }", "]", "output [", "  {", '    name: "TRANSCRIPTS"',
           "    data_type: TYPE_STRING", "    dims: [ 1 ]", "  }", "]",
           *(sequence_batching(max_sequences) if max_sequences else
             ["dynamic_batching {",
              f"  preferred_batch_size: [ {', '.join(map(str, preferred))} ]",
              "  max_queue_delay_microseconds: 2000", "}"]),
           "instance_group [", "  {", "    count: 1", "    kind: KIND_CPU", "  }", "]",
           f'parameters {{ key: "family" value {{ string_value: "{FAMILY}" }} }}',
           f'parameters {{ key: "decoding_method" value {{ string_value: "{method}" }} }}',
           f'parameters {{ key: "beam_size" value {{ string_value: "{beam}" }} }}']
    if method == "fast_beam_search":  # as sherpa's scorer config lists them
        for key, v in zip(("beam", "max_contexts", "max_states"), fast_beam):
            out.append(f'parameters {{ key: "{key}" value {{ string_value: "{v!r}" }} }}')
    return "\n".join(out) + "\n"


def convert(args):
    if args.recipe not in RECIPES:
        fail(f"--recipe {args.recipe}: not an icefall recipe hark converts "
             f"({', '.join(RECIPES)})")
    apply_recipe_defaults(args)
    common_checks(args)
    if args.recipe == "zipformer":
        return convert_zipformer(args)
    convert_conformer(args)


def common_checks(args):
    if not 1 <= args.max_batch_size <= 512:
        fail(f"--max-batch-size {args.max_batch_size}: must be in [1, 512] (hark's limit)")
    if not 0 <= args.streaming <= 4096:
        fail(f"--streaming {args.streaming}: must be in [0, 4096] sequences per instance")
    if args.method not in METHODS:
        if args.method.startswith("fast_beam_search"):
            fail(f"--method {args.method}: not implemented in hark yet (fast_beam_search is "
                 "icefall's one best with the trivial graph; no LG, no n-best)")
        fail(f"--method {args.method}: not one of {', '.join(METHODS)}")
    if args.method == "fast_beam_search" and args.streaming:
        fail("--method fast_beam_search with --streaming: hark's streams decode with "
             "greedy_search or modified_beam_search (fast_beam_search: whole utterances)")
    if not (math.isfinite(args.beam) and args.beam >= 0):
        fail(f"--beam {args.beam}: fast_beam_search's beam must be a finite number >= 0")
    for flag, v in (("--max-contexts", args.max_contexts), ("--max-states", args.max_states)):
        if not 1 <= v <= 1024:
            fail(f"{flag} {v}: must be in [1, 1024]")
    if args.sample_rate != 16000:
        fail(f"--sample-rate {args.sample_rate}: the recipe's features are 16000 Hz (hark "
             "resamples the audio itself)")
    if args.max_sym_per_frame != 1:
        fail(f"--max-sym-per-frame {args.max_sym_per_frame}: hark decodes at most one symbol "
             "per frame (icefall's greedy_search_batch); only 1 is supported")
    if not 1 <= args.beam_size <= 64:
        fail(f"--beam-size {args.beam_size}: must be in [1, 64]")
    if not os.path.isfile(args.tokens):
        fail(f"--tokens {args.tokens}: no such file")


def convert_conformer(args):
    if args.streaming:
        fail(f"--streaming {args.streaming}: pruned_transducer_stateless3 does not stream in "
             "hark (a causal zipformer does: --recipe zipformer --causal True ...)")
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
                      config_pbtxt(name, args.max_batch_size, args.method, args.beam_size,
                                   fast_beam=fast_beam_of(args)),
                      copies={"1/tokens.txt": args.tokens})
    n = sum(a.size for a in tensors.values())
    print(f"wrote {out}: {args.recipe}, {arch['num_encoder_layers']} layers, d "
          f"{arch['encoder_dim']}, vocab {arch['vocab_size']}, {len(tensors)} tensors, {n} values")


# The recipe-specific flags: (flag, type, default). Given for the other recipe, they are refused.
CONFORMER_FLAGS = (
    ("--simulate-streaming", str2bool, False),
    ("--decode-chunk-size", int, 16),
    ("--left-context", int, 64),
    ("--dynamic-chunk-training", str2bool, False),
    ("--causal-convolution", str2bool, False),
    ("--short-chunk-size", int, 25),
    ("--num-left-chunks", int, 4),
)
# zipformer/train.py add_model_arguments (the model flags; their spelling and defaults)
ZIPFORMER_FLAGS = (
    ("--num-encoder-layers", str, "2,2,3,4,3,2"),
    ("--downsampling-factor", str, "1,2,4,8,4,2"),
    ("--feedforward-dim", str, "512,768,1024,1536,1024,768"),
    ("--num-heads", str, "4,4,4,8,4,4"),
    ("--encoder-dim", str, "192,256,384,512,384,256"),
    ("--query-head-dim", str, "32"),
    ("--value-head-dim", str, "12"),
    ("--pos-head-dim", str, "4"),
    ("--pos-dim", int, 48),
    ("--encoder-unmasked-dim", str, "192,192,256,256,256,192"),
    ("--cnn-module-kernel", str, "31,31,15,15,15,31"),
    ("--decoder-dim", int, 512),
    ("--joiner-dim", int, 512),
    ("--causal", str2bool, False),
    ("--chunk-size", str, "16,32,64,-1"),
    ("--left-context-frames", str, "64,128,256,-1"),
    ("--use-transducer", str2bool, True),
    ("--use-ctc", str2bool, False),
    ("--use-attention-decoder", str2bool, False),
    ("--use-cr-ctc", str2bool, False),
    ("--attention-decoder-dim", int, 512),
    ("--attention-decoder-num-layers", int, 6),
    ("--attention-decoder-attention-dim", int, 512),
    ("--attention-decoder-num-heads", int, 8),
    ("--attention-decoder-feedforward-dim", int, 2048),
)


def dest(flag):
    return flag[2:].replace("-", "_")


def apply_recipe_defaults(args):
    """Fills the recipe's defaults for its flags left out; a flag of the other recipe given is
    refused by name."""
    mine, other = ((CONFORMER_FLAGS, ZIPFORMER_FLAGS) if args.recipe != "zipformer"
                   else (ZIPFORMER_FLAGS, CONFORMER_FLAGS))
    for flag, _, _ in other:
        if getattr(args, dest(flag)) is not None:
            fail(f"{flag}: not a flag of the {args.recipe} recipe")
    for flag, _, default in mine:
        if getattr(args, dest(flag)) is None:
            setattr(args, dest(flag), default)


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
                    help="default decoding method: greedy_search | modified_beam_search | "
                    "fast_beam_search")
    ap.add_argument("--sample-rate", type=int, default=16000)
    ap.add_argument("--beam-size", type=int, default=4, help="modified_beam_search width")
    ap.add_argument("--beam", type=float, default=4,
                    help="fast_beam_search's beam (the model's default; requests may override)")
    ap.add_argument("--max-contexts", type=int, default=4,
                    help="fast_beam_search's contexts per frame (default; requests override)")
    ap.add_argument("--max-states", type=int, default=8,
                    help="fast_beam_search's states per frame (default; requests override)")
    ap.add_argument("--context-size", type=int, default=2)
    ap.add_argument("--max-sym-per-frame", type=int, default=1)
    # pruned_transducer_stateless3: pretrained.py and train.py's add_model_arguments
    for flag, typ, default in CONFORMER_FLAGS:
        ap.add_argument(flag, type=typ, default=None,
                        help=f"pruned_transducer_stateless3 (default {default})")
    # zipformer: train.py's add_model_arguments
    for flag, typ, default in ZIPFORMER_FLAGS:
        ap.add_argument(flag, type=typ, default=None, help=f"zipformer (default {default})")
    # hark's
    ap.add_argument("--max-batch-size", type=int, default=64,
                    help="config.pbtxt max_batch_size (preferred sizes: half of it and it)")
    ap.add_argument("--streaming", type=int, default=0, metavar="N",
                    help="serve chunk streams (a causal zipformer): config.pbtxt gets "
                         "sequence_batching (sherpa's model_repo_streaming) with N sequences per "
                         "instance instead of dynamic_batching")
    args = ap.parse_args(argv)
    return run_convert("convert_icefall", convert, args)


if __name__ == "__main__":
    sys.exit(main())
