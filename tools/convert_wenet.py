#!/usr/bin/env python3
# convert_wenet.py — turns a WeNet U2/U2++ checkpoint (final.pt + train.yaml + units.txt +
# global_cmvn) into a hark model directory (docs/model-format.md).
# Tests: tests/model/wenet/test_convert_wenet.c (runs this script on the golden checkpoint).
"""Convert a WeNet U2/U2++ Conformer checkpoint into a hark model directory.

    convert_wenet.py --checkpoint final.pt --config train.yaml --units units.txt \
                     [--cmvn global_cmvn] [--dtype float16] [--max-batch-size 64] --output DIR

DIR receives a Triton-style model-repository entry:
    DIR/config.pbtxt          Triton model config (backend "hark", family "wenet_u2")
    DIR/1/model.safetensors   the weights, WeNet's key names (float32, or with --dtype float16 the
                              matrices as float16)
    DIR/1/model.json          the hyper-parameters, normalised (schema in docs/model-format.md)
    DIR/1/units.txt           the token table

Runs with Debian's /usr/bin/python3 (python3-torch, python3-yaml, python3-numpy). Options hark
does not implement are refused by name; nothing is written unless every check passes.
"""

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hark_entry import narrow_weights, sequence_batching, write_safetensors  # noqa: E402

CONVERTER_VERSION = "1"
MODEL_JSON_VERSION = 1
FAMILY = "wenet_u2"


class ConvertError(Exception):
    pass


def fail(msg):
    raise ConvertError(msg)


# ---- configuration -----------------------------------------------------------------------------



def _opt(conf, section, key, default, allowed=None, check=None):
    """Reads conf[key] (default if absent); refuses values outside `allowed` by name."""
    val = conf.get(key, default)
    if allowed is not None and val not in allowed:
        want = ", ".join(repr(a) for a in allowed)
        fail(f"{section}.{key}: {val!r} is not supported (hark supports {want})")
    if check is not None:
        check(f"{section}.{key}", val)
    return val


def _pos_int(name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        fail(f"{name}: {v!r} must be a positive integer")


def _nonneg_int(name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        fail(f"{name}: {v!r} must be a non-negative integer")


def _integral(name, v):
    """A number that is an exact positive integer (25 or 25.0); returns it as int."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v <= 0:
        fail(f"{name}: {v!r} is not supported (hark needs a positive whole number)")
    return int(v)


def _check_known(conf, section, known):
    for key in conf:
        if key not in known:
            fail(f"{section}.{key}: unknown option; hark does not know whether it changes the "
                 f"model's math, so it refuses it (supported: {', '.join(sorted(known))})")


def _same_float(name, v, want):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or abs(float(v) - want) > 1e-12:
        fail(f"{name}: {v!r} is not supported (hark uses {want})")


def _norm_eps(section):
    return lambda name, v: _same_float(name, v, 1e-5)


# Encoder options accepted for `encoder: conformer`, each with how it is handled.
ENCODER_KEYS = {
    "output_size", "attention_heads", "linear_units", "num_blocks", "input_layer",
    "pos_enc_layer_type", "selfattention_layer_type", "normalize_before", "static_chunk_size",
    "use_dynamic_chunk", "use_dynamic_left_chunk", "macaron_style", "activation_type",
    "use_cnn_module", "cnn_module_kernel", "causal", "cnn_module_norm",
    # same math or training only
    "dropout_rate", "positional_dropout_rate", "attention_dropout_rate", "gradient_checkpointing",
    "use_sdpa", "positionwise_conv_kernel_size", "n_expert", "n_expert_activated",
    # accepted only at their default value
    "query_bias", "key_bias", "value_bias", "conv_bias", "layer_norm_type", "norm_eps",
    "n_kv_head", "head_dim", "mlp_type", "mlp_bias", "conv_norm_eps", "conv_inner_factor",
    "final_norm",
}

DECODER_KEYS = {
    "attention_heads", "linear_units", "num_blocks", "r_num_blocks", "normalize_before",
    "dropout_rate", "positional_dropout_rate", "self_attention_dropout_rate",
    "src_attention_dropout_rate", "gradient_checkpointing", "use_sdpa", "n_expert",
    "n_expert_activated",
    "input_layer", "use_output_layer", "src_attention", "query_bias", "key_bias", "value_bias",
    "src_query_bias", "src_key_bias", "src_value_bias", "activation_type", "tie_word_embedding",
    "layer_norm_type", "norm_eps", "n_kv_head", "head_dim", "mlp_type", "mlp_bias",
}

MODEL_CONF_KEYS = {"ctc_weight", "reverse_weight", "lsm_weight", "length_normalized_loss",
                   "ignore_id", "apply_non_blank_embedding"}


def _check_heads(section, conf, d_model, heads):
    n_kv = conf.get("n_kv_head", None)
    if n_kv is not None and n_kv != heads:
        fail(f"{section}.n_kv_head: {n_kv!r} is not supported (grouped-query attention; hark "
             f"needs n_kv_head absent or equal to attention_heads)")
    head_dim = conf.get("head_dim", None)
    if head_dim is not None and head_dim * heads != d_model:
        fail(f"{section}.head_dim: {head_dim!r} is not supported (hark needs head_dim * "
             f"attention_heads == {d_model})")
    if d_model % heads != 0:
        fail(f"{section}.attention_heads: {heads} does not divide the model size {d_model}")


def parse_config(y):
    """Validates a WeNet train.yaml (a dict) and returns the normalised model.json dict."""
    if not isinstance(y, dict):
        fail("config: not a YAML mapping")

    model_type = y.get("model", "asr_model")
    if model_type != "asr_model":
        fail(f"model: {model_type!r} is not supported (hark supports 'asr_model', WeNet's U2/U2++)")
    enc_type = y.get("encoder", "conformer")
    if enc_type != "conformer":
        fail(f"encoder: {enc_type!r} is not supported (hark supports 'conformer')")
    dec_type = y.get("decoder", "bitransformer")
    if dec_type not in (None, "transformer", "bitransformer"):
        fail(f"decoder: {dec_type!r} is not supported (hark supports 'transformer', "
             f"'bitransformer' or none)")
    ctc_type = y.get("ctc", "ctc")
    if ctc_type != "ctc":
        fail(f"ctc: {ctc_type!r} is not supported (hark supports 'ctc')")
    if y.get("use_lora", False):
        fail("use_lora: True is not supported (merge the LoRA weights first)")

    # ---- front end
    ds = y.get("dataset_conf", {}) or {}
    feats_type = ds.get("feats_type", "fbank")
    if feats_type != "fbank":
        fail(f"dataset_conf.feats_type: {feats_type!r} is not supported (hark supports 'fbank')")
    fb = ds.get("fbank_conf", {}) or {}
    _opt(fb, "dataset_conf.fbank_conf", "window_type", "povey", allowed=["povey"])
    num_mel_bins = _integral("dataset_conf.fbank_conf.num_mel_bins", fb.get("num_mel_bins", 23))
    frame_length = _integral("dataset_conf.fbank_conf.frame_length", fb.get("frame_length", 25))
    frame_shift = _integral("dataset_conf.fbank_conf.frame_shift", fb.get("frame_shift", 10))
    rs = ds.get("resample_conf", {}) or {}
    sample_rate = _integral("dataset_conf.resample_conf.resample_rate",
                            rs.get("resample_rate", 16000))

    if "input_dim" not in y:
        fail("input_dim: missing")
    input_dim = y["input_dim"]
    _pos_int("input_dim", input_dim)
    if input_dim != num_mel_bins:
        fail(f"input_dim: {input_dim} differs from dataset_conf.fbank_conf.num_mel_bins "
             f"{num_mel_bins}")

    cmvn = y.get("cmvn", None)
    if cmvn is None and y.get("cmvn_file"):  # WeNet 2.x yaml: a top-level cmvn_file
        cmvn = "global_cmvn"
    if cmvn not in (None, "global_cmvn"):
        fail(f"cmvn: {cmvn!r} is not supported (hark supports 'global_cmvn' or none)")

    # ---- encoder
    ec = y.get("encoder_conf", {}) or {}
    S = "encoder_conf"
    if "efficient_conf" in ec:
        fail(f"{S}.efficient_conf: is not supported (efficientConformer)")
    _check_known(ec, S, ENCODER_KEYS)
    d_model = _opt(ec, S, "output_size", 256, check=_pos_int)
    heads = _opt(ec, S, "attention_heads", 4, check=_pos_int)
    ffn = _opt(ec, S, "linear_units", 2048, check=_pos_int)
    blocks = _opt(ec, S, "num_blocks", 6, check=_pos_int)
    input_layer = _opt(ec, S, "input_layer", "conv2d", allowed=["conv2d", "conv2d6", "conv2d8"])
    pos = _opt(ec, S, "pos_enc_layer_type", "rel_pos", allowed=["rel_pos", "abs_pos"])
    att = _opt(ec, S, "selfattention_layer_type", "rel_selfattn",
               allowed=["rel_selfattn", "selfattn"])
    if (pos == "rel_pos") != (att == "rel_selfattn"):
        fail(f"{S}.selfattention_layer_type: {att!r} with pos_enc_layer_type {pos!r} is not "
             f"supported (hark supports rel_pos with rel_selfattn, abs_pos with selfattn)")
    normalize_before = bool(_opt(ec, S, "normalize_before", True, allowed=[True, False]))
    static_chunk = _opt(ec, S, "static_chunk_size", 0, check=_nonneg_int)
    dyn_chunk = bool(_opt(ec, S, "use_dynamic_chunk", False, allowed=[True, False]))
    _opt(ec, S, "use_dynamic_left_chunk", False, allowed=[True, False])  # training only
    macaron = bool(_opt(ec, S, "macaron_style", True, allowed=[True, False]))
    act = _opt(ec, S, "activation_type", "swish", allowed=["swish", "relu", "gelu"])
    use_cnn = bool(_opt(ec, S, "use_cnn_module", True, allowed=[True, False]))
    kernel = _opt(ec, S, "cnn_module_kernel", 15, check=_pos_int)
    causal = bool(_opt(ec, S, "causal", False, allowed=[True, False]))
    if use_cnn and not causal and kernel % 2 == 0:
        fail(f"{S}.cnn_module_kernel: {kernel} must be odd for a non-causal convolution module")
    cnn_norm = _opt(ec, S, "cnn_module_norm", "batch_norm", allowed=["batch_norm", "layer_norm"])
    for key in ("query_bias", "key_bias", "value_bias", "conv_bias", "mlp_bias", "final_norm"):
        _opt(ec, S, key, True, allowed=[True])
    _opt(ec, S, "layer_norm_type", "layer_norm", allowed=["layer_norm"])
    _opt(ec, S, "mlp_type", "position_wise_feed_forward", allowed=["position_wise_feed_forward"])
    _opt(ec, S, "norm_eps", 1e-5, check=_norm_eps(S))
    _opt(ec, S, "conv_norm_eps", 1e-5, check=_norm_eps(S))
    _opt(ec, S, "conv_inner_factor", 2, allowed=[2])
    _check_heads(S, ec, d_model, heads)
    if input_layer == "conv2d":
        feat = ((input_dim - 1) // 2 - 1) // 2
    elif input_layer == "conv2d6":
        feat = ((input_dim - 1) // 2 - 2) // 3
    else:
        feat = (((input_dim - 1) // 2 - 1) // 2 - 1) // 2
    if feat < 1:
        fail(f"input_dim: {input_dim} is too small for {S}.input_layer {input_layer!r}")

    # ---- vocabulary
    if "output_dim" not in y:
        fail("output_dim: missing")
    vocab = y["output_dim"]
    _pos_int("output_dim", vocab)
    if "vocab_size" in y and y["vocab_size"] != vocab:
        fail(f"vocab_size: {y['vocab_size']!r} differs from output_dim {vocab}")
    special = (y.get("tokenizer_conf", {}) or {}).get("special_tokens", None)
    sos = vocab - 1 if special is None else special.get("<sos>", vocab - 1)
    eos = vocab - 1 if special is None else special.get("<eos>", vocab - 1)
    blank = (y.get("ctc_conf", {}) or {}).get("ctc_blank_id", 0)
    for name, v in (("tokenizer_conf.special_tokens.<sos>", sos),
                    ("tokenizer_conf.special_tokens.<eos>", eos), ("ctc_conf.ctc_blank_id", blank)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < vocab:
            fail(f"{name}: {v!r} is not a token id in [0, {vocab})")

    # ---- decoder
    mc = y.get("model_conf", {}) or {}
    _check_known(mc, "model_conf", MODEL_CONF_KEYS)
    _opt(mc, "model_conf", "apply_non_blank_embedding", False, allowed=[False])
    dec = {"type": "none", "n_heads": 0, "ffn_dim": 0, "n_blocks": 0, "r_n_blocks": 0,
           "normalize_before": True}
    if dec_type is not None:
        dc = y.get("decoder_conf", {}) or {}
        S = "decoder_conf"
        known = set(DECODER_KEYS)
        if dec_type == "transformer":
            known.discard("r_num_blocks")
        _check_known(dc, S, known)
        dheads = _opt(dc, S, "attention_heads", 4, check=_pos_int)
        dec = {
            "type": dec_type,
            "n_heads": dheads,
            "ffn_dim": _opt(dc, S, "linear_units", 2048, check=_pos_int),
            "n_blocks": _opt(dc, S, "num_blocks", 6, check=_nonneg_int),
            "r_n_blocks": (_opt(dc, S, "r_num_blocks", 0, check=_nonneg_int)
                           if dec_type == "bitransformer" else 0),
            "normalize_before": bool(_opt(dc, S, "normalize_before", True,
                                          allowed=[True, False])),
        }
        _opt(dc, S, "input_layer", "embed", allowed=["embed"])
        for key in ("use_output_layer", "src_attention", "query_bias", "key_bias", "value_bias",
                    "src_query_bias", "src_key_bias", "src_value_bias", "mlp_bias"):
            _opt(dc, S, key, True, allowed=[True])
        _opt(dc, S, "tie_word_embedding", False, allowed=[False])
        _opt(dc, S, "activation_type", "relu", allowed=["relu"])
        _opt(dc, S, "layer_norm_type", "layer_norm", allowed=["layer_norm"])
        _opt(dc, S, "mlp_type", "position_wise_feed_forward",
             allowed=["position_wise_feed_forward"])
        _opt(dc, S, "norm_eps", 1e-5, check=_norm_eps(S))
        _check_heads(S, dc, d_model, dheads)

    # ---- decoding defaults
    dcd = y.get("decoding_conf", y.get("decode_conf", {})) or {}
    ctc_weight = float(dcd.get("ctc_weight", 0.5))
    if not 0.0 <= ctc_weight <= 1.0:
        fail(f"decoding_conf.ctc_weight: {ctc_weight} must be in [0, 1]")
    reverse_weight = float(dcd.get("reverse_weight", mc.get("reverse_weight", 0.3)))
    if dec_type != "bitransformer":
        reverse_weight = 0.0
    if not 0.0 <= reverse_weight < 1.0:
        fail(f"model_conf.reverse_weight: {reverse_weight} must be in [0, 1)")

    return {
        "format_version": MODEL_JSON_VERSION,
        "family": FAMILY,
        "frontend": {
            "num_mel_bins": num_mel_bins,
            "sample_rate": sample_rate,
            "frame_length_ms": frame_length,
            "frame_shift_ms": frame_shift,
            "cmvn": cmvn == "global_cmvn",
        },
        "encoder": {
            "type": "conformer",
            "input_dim": input_dim,
            "d_model": d_model,
            "n_heads": heads,
            "ffn_dim": ffn,
            "n_blocks": blocks,
            "input_layer": input_layer,
            "pos_enc": pos,
            "macaron_style": macaron,
            "use_cnn_module": use_cnn,
            "cnn_module_kernel": kernel,
            "causal": causal,
            "cnn_module_norm": cnn_norm,
            "activation": act,
            "normalize_before": normalize_before,
            "max_len": 5000,
            "static_chunk_size": static_chunk,
            "use_dynamic_chunk": dyn_chunk,
        },
        "decoder": dec,
        "vocab": {"size": vocab, "sos": sos, "eos": eos, "blank": blank},
        "decoding": {"ctc_weight": ctc_weight, "reverse_weight": reverse_weight},
    }


# ---- tensors -----------------------------------------------------------------------------------

def expected_tensors(cfg):
    """name -> shape of every tensor the architecture needs (after dropping pe buffers)."""
    e, dcfg, V = cfg["encoder"], cfg["decoder"], cfg["vocab"]["size"]
    D, H, F, K, I = e["d_model"], e["n_heads"], e["ffn_dim"], e["cnn_module_kernel"], e["input_dim"]
    out = {}

    def lin(name, o, i, bias=True):
        out[name + ".weight"] = (o, i)
        if bias:
            out[name + ".bias"] = (o,)

    def norm(name, n=D):
        out[name + ".weight"] = (n,)
        out[name + ".bias"] = (n,)

    if cfg["frontend"]["cmvn"]:
        out["encoder.global_cmvn.mean"] = (I,)
        out["encoder.global_cmvn.istd"] = (I,)
    conv = {"conv2d": [3, 3], "conv2d6": [3, 5], "conv2d8": [3, 3, 3]}[e["input_layer"]]
    for j, k in enumerate(conv):
        out[f"encoder.embed.conv.{2 * j}.weight"] = (D, 1 if j == 0 else D, k, k)
        out[f"encoder.embed.conv.{2 * j}.bias"] = (D,)
    if e["input_layer"] == "conv2d":
        lin("encoder.embed.out.0", D, D * (((I - 1) // 2 - 1) // 2))
    elif e["input_layer"] == "conv2d6":
        lin("encoder.embed.linear", D, D * (((I - 1) // 2 - 2) // 3))
    else:
        lin("encoder.embed.linear", D, D * ((((I - 1) // 2 - 1) // 2 - 1) // 2))
    norm("encoder.after_norm")
    for b in range(e["n_blocks"]):
        p = f"encoder.encoders.{b}."
        for m in ("linear_q", "linear_k", "linear_v", "linear_out"):
            lin(p + "self_attn." + m, D, D)
        if e["pos_enc"] == "rel_pos":
            lin(p + "self_attn.linear_pos", D, D, bias=False)
            out[p + "self_attn.pos_bias_u"] = (H, D // H)
            out[p + "self_attn.pos_bias_v"] = (H, D // H)
        ffs = ["feed_forward"] + (["feed_forward_macaron"] if e["macaron_style"] else [])
        for ff in ffs:
            lin(p + ff + ".w_1", F, D)
            lin(p + ff + ".w_2", D, F)
        norm(p + "norm_ff")
        norm(p + "norm_mha")
        if e["macaron_style"]:
            norm(p + "norm_ff_macaron")
        if e["use_cnn_module"]:
            c = p + "conv_module."
            out[c + "pointwise_conv1.weight"] = (2 * D, D, 1)
            out[c + "pointwise_conv1.bias"] = (2 * D,)
            out[c + "depthwise_conv.weight"] = (D, 1, K)
            out[c + "depthwise_conv.bias"] = (D,)
            norm(c + "norm")
            if e["cnn_module_norm"] == "batch_norm":
                out[c + "norm.running_mean"] = (D,)
                out[c + "norm.running_var"] = (D,)
            out[c + "pointwise_conv2.weight"] = (D, D, 1)
            out[c + "pointwise_conv2.bias"] = (D,)
            norm(p + "norm_conv")
            norm(p + "norm_final")

    def decoder(prefix, blocks):
        out[prefix + "embed.0.weight"] = (V, D)
        norm(prefix + "after_norm")
        lin(prefix + "output_layer", V, D)
        for b in range(blocks):
            p = f"{prefix}decoders.{b}."
            for a in ("self_attn", "src_attn"):
                for m in ("linear_q", "linear_k", "linear_v", "linear_out"):
                    lin(f"{p}{a}.{m}", D, D)
            lin(p + "feed_forward.w_1", dcfg["ffn_dim"], D)
            lin(p + "feed_forward.w_2", D, dcfg["ffn_dim"])
            for n in ("norm1", "norm2", "norm3"):
                norm(p + n)

    if dcfg["type"] == "transformer":
        decoder("decoder.", dcfg["n_blocks"])
    elif dcfg["type"] == "bitransformer":
        decoder("decoder.left_decoder.", dcfg["n_blocks"])
        decoder("decoder.right_decoder.", dcfg["r_n_blocks"])
    lin("ctc.ctc_lo", V, D)
    return out


def is_dropped(name):
    """Buffers hark does not store: BatchNorm step counters and sinusoidal pe tables."""
    return name.endswith(".num_batches_tracked") or re.search(r"(^|\.)pe$", name) is not None


def load_state_dict(path):
    import torch
    try:
        sd = torch.load(path, map_location="cpu")
    except Exception as ex:  # torch raises many types for a bad file
        fail(f"{path}: cannot load checkpoint: {ex}")
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        fail(f"{path}: not a state dict (a mapping of tensor names to tensors)")
    return sd


def check_tensors(sd, cfg):
    """Refuses missing, unexpected or wrongly shaped tensors; returns {name: float32 ndarray}."""
    exp = expected_tensors(cfg)
    for name, t in sd.items():
        if is_dropped(name):
            if name.endswith(".pe"):
                pe_len = t.shape[1] if t.dim() == 3 else t.shape[0]
                cfg["encoder"]["max_len"] = min(cfg["encoder"]["max_len"], int(pe_len))
            continue
        if name not in exp:
            fail(f"tensor {name}: unexpected in the checkpoint for this configuration (shape "
                 f"{list(t.shape)}); the yaml does not describe this model")
    for name, shape in exp.items():
        if name not in sd:
            fail(f"tensor {name}: missing from the checkpoint (expected shape {list(shape)})")
        if tuple(sd[name].shape) != tuple(shape):
            fail(f"tensor {name}: expected shape {list(shape)}, checkpoint has "
                 f"{list(sd[name].shape)}")
        if not sd[name].is_floating_point():
            fail(f"tensor {name}: dtype {sd[name].dtype} is not a floating-point type")
    out = {}
    for name, t in sd.items():
        if name in exp:
            out[name] = t.detach().float().contiguous().numpy().astype("<f4", copy=False)
    return out


# ---- CMVN --------------------------------------------------------------------------------------

def load_cmvn(path):
    """mean, istd (float64) from a WeNet json CMVN file (or Kaldi text stats), as WeNet does."""
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8", errors="replace").strip()
    if text.startswith("{"):
        try:
            st = json.loads(text)
            mean = np.asarray(st["mean_stat"], dtype=np.float64)
            var = np.asarray(st["var_stat"], dtype=np.float64)
            count = float(st["frame_num"])
        except (ValueError, KeyError, TypeError) as ex:
            fail(f"{path}: not a WeNet json CMVN file ({ex}); need mean_stat, var_stat, frame_num")
    elif raw[:2] == b"\0B":
        fail(f"{path}: binary Kaldi CMVN is not supported; write it with "
             f"compute-cmvn-stats --binary=false")
    else:
        arr = text.split()
        if len(arr) < 6 or arr[0] != "[" or arr[-1] != "]" or arr[-2] != "0":
            fail(f"{path}: neither a WeNet json CMVN file nor Kaldi text CMVN stats")
        dim = (len(arr) - 4) // 2
        mean = np.asarray([float(a) for a in arr[1:dim + 1]], dtype=np.float64)
        count = float(arr[dim + 1])
        var = np.asarray([float(a) for a in arr[dim + 2:2 * dim + 2]], dtype=np.float64)
    if mean.ndim != 1 or mean.shape != var.shape or count <= 0:
        fail(f"{path}: mean_stat and var_stat must be equal-length lists and frame_num > 0")
    # Element by element in Python floats, as wenet/utils/cmvn.py does.
    m = [float(x) / count for x in mean]
    istd = []
    for i, mi in enumerate(m):
        v = float(var[i]) / count - mi * mi
        if v < 1.0e-20:
            v = 1.0e-20
        istd.append(1.0 / math.sqrt(v))
    return np.asarray(m, dtype=np.float64), np.asarray(istd, dtype=np.float64)


def apply_cmvn(tensors, cfg, cmvn_path, had_cmvn):
    if not cfg["frontend"]["cmvn"]:
        if cmvn_path:
            fail(f"--cmvn {cmvn_path}: the yaml's cmvn is not 'global_cmvn', so WeNet applies no "
                 f"CMVN; drop --cmvn or fix the yaml")
        return
    I = cfg["encoder"]["input_dim"]
    if cmvn_path:
        mean, istd = load_cmvn(cmvn_path)
        if mean.shape[0] != I:
            fail(f"{cmvn_path}: {mean.shape[0]} dims, the model's input_dim is {I}")
        mean32, istd32 = mean.astype("<f4"), istd.astype("<f4")
        if had_cmvn:
            for nm, mine in (("mean", mean32), ("istd", istd32)):
                ck = tensors[f"encoder.global_cmvn.{nm}"]
                if not np.array_equal(ck, mine):
                    d = float(np.max(np.abs(ck.astype(np.float64) - mine)))
                    fail(f"tensor encoder.global_cmvn.{nm}: the checkpoint's values differ from "
                         f"those computed from {cmvn_path} (max abs diff {d:.3g}); WeNet uses the "
                         f"checkpoint's, so pass the global_cmvn it was trained with")
        tensors["encoder.global_cmvn.mean"] = mean32
        tensors["encoder.global_cmvn.istd"] = istd32
    elif not had_cmvn:
        fail("--cmvn: required (the yaml uses global_cmvn and the checkpoint holds no "
             "encoder.global_cmvn.mean/istd)")


# ---- units -------------------------------------------------------------------------------------

def check_units(path, vocab):
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as ex:
        fail(f"{path}: cannot read the unit table: {ex}")
    if lines and lines[-1] == "":
        lines.pop()
    for i, line in enumerate(lines):
        arr = line.split()
        if len(arr) != 2:
            fail(f"{path}:{i + 1}: expected 'token id', got {line!r}")
        if arr[1] != str(i):
            fail(f"{path}:{i + 1}: id {arr[1]!r}, expected {i} (ids must be 0..V-1 in order)")
    if len(lines) != vocab:
        fail(f"{path}: {len(lines)} units, but the model's vocabulary (ctc.ctc_lo.weight rows, "
             f"output_dim) has {vocab}")


# ---- writers -----------------------------------------------------------------------------------

def config_pbtxt(name, cfg, max_batch=64, max_sequences=0):
    """Triton config. Preferred batch sizes [max/2, max]: a free instance takes a full batch when
    max_batch_size requests wait, else half of one (so two instances, or one instance and the
    requests coming back, keep the GPU busy), else waits max_queue_delay for more."""
    method = "attention_rescoring" if cfg["decoder"]["type"] != "none" else "ctc_prefix_beam_search"
    preferred = sorted({max(1, max_batch // 2), max_batch})
    params = [("family", FAMILY), ("decoding_method", method), ("beam_size", "10"),
              ("ctc_weight", repr(cfg["decoding"]["ctc_weight"])),
              ("reverse_weight", repr(cfg["decoding"]["reverse_weight"]))]
    out = [f'name: "{name}"', 'backend: "hark"', f"max_batch_size: {max_batch}",
           "input [", "  {", '    name: "WAV"', "    data_type: TYPE_FP32", "    dims: [ -1 ]",
           "  },", "  {", '    name: "WAV_LENS"', "    data_type: TYPE_INT32", "    dims: [ 1 ]",
           "  }", "]",
           "output [", "  {", '    name: "TRANSCRIPTS"', "    data_type: TYPE_STRING",
           "    dims: [ 1 ]", "  }", "]",
           *(sequence_batching(max_sequences) if max_sequences else
             ["dynamic_batching {", f"  preferred_batch_size: [ {', '.join(map(str, preferred))} ]",
              "  max_queue_delay_microseconds: 2000", "}"]),
           "instance_group [", "  {", "    count: 1", "    kind: KIND_GPU", "  }", "]"]
    for k, v in params:
        out.append(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}')
    return "\n".join(out) + "\n"


def convert(args):
    if not 0 <= args.streaming <= 4096:
        fail(f"--streaming {args.streaming}: must be in [0, 4096] sequences per instance")
    if not 1 <= args.max_batch_size <= 512:
        fail(f"--max-batch-size {args.max_batch_size}: must be in [1, 512] (hark's limit)")
    try:
        with open(args.config, encoding="utf-8") as f:
            y = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as ex:
        fail(f"{args.config}: cannot read the config: {ex}")
    cfg = parse_config(y)
    sd = load_state_dict(args.checkpoint)
    had_cmvn = "encoder.global_cmvn.mean" in sd
    tensors = check_tensors(sd, cfg)
    vocab = tensors["ctc.ctc_lo.weight"].shape[0]
    if vocab != cfg["vocab"]["size"]:  # cannot happen after check_tensors; defensive
        fail(f"tensor ctc.ctc_lo.weight: {vocab} rows, output_dim is {cfg['vocab']['size']}")
    check_units(args.units, vocab)
    apply_cmvn(tensors, cfg, args.cmvn, had_cmvn)
    tensors = narrow_weights(tensors, args.dtype, fail)

    # Everything checked: write into a temporary directory beside DIR, then move into place.
    out = os.path.normpath(args.output)
    name = os.path.basename(os.path.abspath(out))
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        fail(f"--output {args.output}: the model name {name!r} must use only A-Z a-z 0-9 _ . -")
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}.", dir=parent)
    os.chmod(tmp, 0o755)
    try:
        os.makedirs(os.path.join(tmp, "1"))
        meta = {"format": "hark", "family": FAMILY, "converter": "tools/convert_wenet.py",
                "converter_version": CONVERTER_VERSION,
                "source": os.path.basename(args.checkpoint)}
        write_safetensors(os.path.join(tmp, "1", "model.safetensors"), tensors, meta)
        with open(os.path.join(tmp, "1", "model.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        shutil.copyfile(args.units, os.path.join(tmp, "1", "units.txt"))
        with open(os.path.join(tmp, "config.pbtxt"), "w", encoding="utf-8") as f:
            f.write(config_pbtxt(name, cfg, args.max_batch_size, args.streaming))
        if os.path.isdir(out):
            for rel in ("config.pbtxt", "1/model.safetensors", "1/model.json", "1/units.txt"):
                if os.path.exists(os.path.join(out, rel)):
                    os.remove(os.path.join(out, rel))
            os.makedirs(os.path.join(out, "1"), exist_ok=True)
            for rel in ("1/model.safetensors", "1/model.json", "1/units.txt", "config.pbtxt"):
                os.replace(os.path.join(tmp, rel), os.path.join(out, rel))
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    n = sum(a.size for a in tensors.values())
    print(f"wrote {out}: {len(tensors)} tensors, {n} values, vocab {vocab}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="WeNet final.pt (a state dict)")
    ap.add_argument("--config", required=True, help="WeNet train.yaml")
    ap.add_argument("--units", required=True, help="units.txt ('token id' per line)")
    ap.add_argument("--cmvn", help="global_cmvn (WeNet json or Kaldi text stats)")
    ap.add_argument("--output", required=True, help="model directory to write")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16"],
                    help="how the weight matrices are stored (float16 halves the file; hark "
                         "computes in float32 from them on the CPU either way)")
    ap.add_argument("--max-batch-size", type=int, default=64,
                    help="config.pbtxt max_batch_size (preferred sizes: half of it and it)")
    ap.add_argument("--streaming", type=int, default=0, metavar="N",
                    help="serve chunk streams: config.pbtxt gets sequence_batching (WeNet's "
                         "streaming_wenet) with N sequences per instance instead of "
                         "dynamic_batching (the model must be trained with dynamic chunks)")
    args = ap.parse_args(argv)
    try:
        convert(args)
    except ConvertError as ex:
        print(f"convert_wenet: error: {ex}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
