#!/usr/bin/env python3
# convert_jasper.py — turns an NVIDIA DeepLearningExamples Jasper or QuartzNet checkpoint
# (Checkpointer.save output + the model yaml) into a hark model directory (docs/model-format.md).
# Tests: tests/model/jasper/test_convert_jasper.c (runs this script on the golden checkpoint).
"""Convert a DeepLearningExamples Jasper / QuartzNet checkpoint into a hark model directory.

    convert_jasper.py --checkpoint FILE.pt --config MODEL.yaml --output DIR
                      [--no-ema] [--pad-leading N] [--max-batch-size 64] [--triton-dle]

DIR receives a Triton-style model-repository entry:
    DIR/config.pbtxt          Triton model config (backend "hark", family "jasper")
    DIR/1/model.safetensors   every weight as float32, DLE's key names (num_batches_tracked dropped)
    DIR/1/model.json          the front end, encoder blocks and labels, normalised
                              (schema in docs/model-format.md)

The weights are those DLE's inference.py loads: `ema_state_dict` when the checkpoint has one
(inference.sh runs with --ema), else `state_dict` (--no-ema: always `state_dict`); a bare state
dict is accepted too. v1 key names are renamed as DLE's convert_v1_state_dict does.
--pad-leading defaults to DLE's: 16 zero feature frames in front for Jasper (inference.py
--pad_leading), 0 for QuartzNet (its inference.py has no such option).
--triton-dle writes DLE's Triton ensemble contract (AUDIO_SIGNAL, NUM_SAMPLES -> TRANSCRIPT)
into config.pbtxt instead of the generic WAV, WAV_LENS -> TRANSCRIPTS; hark serves both either way.

Runs with Debian's /usr/bin/python3 (python3-torch, python3-yaml, python3-numpy). Options hark
does not implement are refused by name; nothing is written unless every check passes.
"""

import argparse
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np

from hark_entry import entry_name, fail, run_convert, write_entry
import yaml

CONVERTER_VERSION = "1"
MODEL_JSON_VERSION = 1
FAMILY = "jasper"


# ---- configuration -----------------------------------------------------------------------------

FEATURE_KEYS = {  # FilterbankFeatures arguments: default, values hark implements (None: any)
    "sample_rate": (8000, None),
    "window_size": (0.02, (0.02,)),
    "window_stride": (0.01, (0.01,)),
    "window": ("hamming", ("hann",)),
    "normalize": ("per_feature", ("per_feature",)),
    "n_fft": (None, None),
    "preemph": (0.97, (0.97,)),
    "n_filt": (64, None),
    "lowfreq": (0, (0, 0.0)),
    "highfreq": (None, None),
    "log": (True, (True,)),
    "dither": (1e-5, None),
    "pad_align": (8, None),
    "pad_to_max_duration": (False, (False,)),
    "max_duration": (float("inf"), None),
    "frame_splicing": (1, (1,)),
}

BLOCK_KEYS = {"filters", "repeat", "kernel_size", "stride", "dilation", "dropout", "residual",
              "residual_dense", "separable", "groups", "heads", "normalization", "norm_groups",
              "kernel_size_factor", "padding", "infilters"}


def parse_features(y):
    iv = y.get("input_val")
    if not isinstance(iv, dict) or not isinstance(iv.get("filterbank_features"), dict):
        fail("input_val.filterbank_features: missing (the yaml must describe the inference "
             "front end, as DLE's config.input(cfg, 'val') reads it)")
    fb = dict(iv["filterbank_features"])
    for aug in ("spec_augment", "cutout_augment"):
        if fb.get(aug):
            fail(f"input_val.filterbank_features.{aug}: random augmentation at inference is not "
                 f"supported")
        fb.pop(aug, None)
    out = {}
    for k, v in fb.items():
        if k not in FEATURE_KEYS:
            fail(f"input_val.filterbank_features.{k}: unknown option (DLE's FilterbankFeatures "
                 f"has no such argument)")
    for k, (default, allowed) in FEATURE_KEYS.items():
        v = fb.get(k, default)
        if allowed is not None and v not in allowed:
            want = ", ".join(repr(a) for a in allowed)
            fail(f"input_val.filterbank_features.{k}: {v!r} is not supported (hark supports "
                 f"{want})")
        out[k] = v
    sr = out["sample_rate"]
    if not isinstance(sr, int) or not 8000 <= sr <= 48000:
        fail(f"input_val.filterbank_features.sample_rate: {sr!r} must be an integer in "
             f"[8000, 48000]")
    win = int(sr * out["window_size"])
    n_fft = out["n_fft"] or 2 ** math.ceil(math.log2(win))
    if n_fft != 2 ** math.ceil(math.log2(win)):
        fail(f"input_val.filterbank_features.n_fft: {n_fft} is not supported (hark's nemo-mel "
             f"uses the next power of two of the window, {2 ** math.ceil(math.log2(win))})")
    hf = out["highfreq"]
    if hf is not None and float(hf) != sr / 2:
        fail(f"input_val.filterbank_features.highfreq: {hf!r} is not supported (hark's nemo-mel "
             f"goes up to sample_rate / 2)")
    nf = out["n_filt"]
    if not isinstance(nf, int) or not 1 <= nf <= 512:
        fail(f"input_val.filterbank_features.n_filt: {nf!r} must be an integer in [1, 512]")
    pa = out["pad_align"]
    if not isinstance(pa, int) or not 0 <= pa <= 1024:
        fail(f"input_val.filterbank_features.pad_align: {pa!r} must be an integer in [0, 1024]")
    d = out["dither"]
    if not isinstance(d, (int, float)) or d < 0:
        fail(f"input_val.filterbank_features.dither: {d!r} must be a number >= 0")
    return {"kind": "nemo-mel", "sample_rate": sr, "n_filt": nf, "n_fft": n_fft,
            "win_length": win, "hop_length": int(sr * out["window_stride"]), "window": "hann",
            "preemph": 0.97, "log_guard": 1e-20, "normalize": "per_feature",
            "pad_align": pa, "dither_ignored": float(d)}


def _one(blk, i, key, default):
    v = blk.get(key, default)
    if isinstance(v, (list, tuple)):
        if len(v) != 1:
            fail(f"encoder.blocks[{i}].{key}: {v!r} must hold one value (1-D convolutions)")
        v = v[0]
    if not isinstance(v, int) or isinstance(v, bool):
        fail(f"encoder.blocks[{i}].{key}: {v!r} must be an integer")
    return v


def parse_encoder(y):
    archs = [a for a in ("jasper", "quartznet") if a in y]
    if len(archs) != 1:
        fail("the yaml must have exactly one of the sections 'jasper' or 'quartznet' "
             f"(found {archs or 'neither'})")
    arch = archs[0]
    sec = y[arch]
    if not isinstance(sec, dict) or not isinstance(sec.get("encoder"), dict):
        fail(f"{arch}.encoder: missing")
    enc = sec["encoder"]
    for k in enc:
        if k not in ("init", "in_feats", "frame_splicing", "activation", "use_conv_masks",
                     "blocks"):
            fail(f"{arch}.encoder.{k}: unknown option")
    act = enc.get("activation")
    if act not in ("relu", "hardtanh"):
        fail(f"{arch}.encoder.activation: {act!r} is not supported (hark supports 'relu', "
             f"'hardtanh')")
    if enc.get("frame_splicing", 1) != 1:
        fail(f"{arch}.encoder.frame_splicing: {enc.get('frame_splicing')!r} is not supported "
             f"(hark supports 1)")
    masks = enc.get("use_conv_masks", False)
    if not isinstance(masks, bool):
        fail(f"{arch}.encoder.use_conv_masks: {masks!r} must be true or false")
    in_feats = enc.get("in_feats")
    if not isinstance(in_feats, int) or in_feats < 1:
        fail(f"{arch}.encoder.in_feats: {in_feats!r} must be a positive integer")
    blocks_y = enc.get("blocks")
    if not isinstance(blocks_y, list) or not blocks_y:
        fail(f"{arch}.encoder.blocks: must be a non-empty list")
    blocks = []
    xs = [in_feats]  # channels of the list a block receives (DLE's `xs`)
    all_panes = []   # JasperEncoder's all_residual_panes
    cin = in_feats
    for i, blk in enumerate(blocks_y):
        if not isinstance(blk, dict):
            fail(f"encoder.blocks[{i}]: must be a mapping")
        for k in blk:
            if k not in BLOCK_KEYS:
                fail(f"encoder.blocks[{i}].{k}: unknown option")
        if blk.get("padding", "same") != "same":
            fail(f"encoder.blocks[{i}].padding: {blk['padding']!r} is not supported ('same')")
        if blk.get("groups", 1) != 1:
            fail(f"encoder.blocks[{i}].groups: {blk['groups']!r} is not supported (hark supports "
                 f"1: no grouped convolutions / channel shuffle)")
        if blk.get("heads", -1) != -1:
            fail(f"encoder.blocks[{i}].heads: {blk['heads']!r} is not supported (-1)")
        if blk.get("normalization", "batch") != "batch":
            fail(f"encoder.blocks[{i}].normalization: {blk['normalization']!r} is not supported "
                 f"(hark supports 'batch')")
        sep = blk.get("separable", False)
        if sep and arch != "quartznet":
            fail(f"encoder.blocks[{i}].separable: Jasper's JasperBlock has no separable "
                 f"convolutions")
        if not isinstance(sep, bool):
            fail(f"encoder.blocks[{i}].separable: {sep!r} must be true or false")
        filters = blk.get("filters")
        repeat = blk.get("repeat", 3)
        if not isinstance(filters, int) or filters < 1:
            fail(f"encoder.blocks[{i}].filters: {filters!r} must be a positive integer")
        if not isinstance(repeat, int) or repeat < 1:
            fail(f"encoder.blocks[{i}].repeat: {repeat!r} must be a positive integer")
        k = _one(blk, i, "kernel_size", 11)
        if arch == "quartznet":  # compute_new_kernel_size
            kf = float(blk.get("kernel_size_factor", 1))
            k = max(int(k * kf), 1)
            if k % 2 == 0:
                k += 1
        elif "kernel_size_factor" in blk:
            fail(f"encoder.blocks[{i}].kernel_size_factor: not an option of Jasper's JasperBlock")
        s = _one(blk, i, "stride", 1)
        d = _one(blk, i, "dilation", 1)
        if k < 1 or k % 2 == 0:
            fail(f"encoder.blocks[{i}].kernel_size: {k} is not supported (odd sizes only: an even "
                 f"'same' kernel changes the length)")
        if s < 1 or d < 1:
            fail(f"encoder.blocks[{i}]: stride and dilation must be >= 1")
        if s > 1 and d > 1:
            fail(f"encoder.blocks[{i}]: stride {s} with dilation {d} (DLE allows only one of them "
                 f"> 1)")
        residual = blk.get("residual", True)
        dense = blk.get("residual_dense", False)
        if dense:
            all_panes = all_panes + [cin]
        panes = []
        dense_out = False
        if residual:
            if s != 1:
                fail(f"encoder.blocks[{i}]: a residual block with stride {s} is not supported "
                     f"(the residual branch would not match in length)")
            panes = list(all_panes) if dense else [cin]
            dense_out = bool(dense)
            for p, c in enumerate(panes):
                if p >= len(xs) or xs[p] != c:
                    fail(f"encoder.blocks[{i}]: residual pane {p} expects {c} channels but the "
                         f"block receives {xs[p] if p < len(xs) else 'no such pane'} (DLE would "
                         f"fail on this model too)")
        blocks.append({"filters": filters, "repeat": repeat, "kernel": k, "stride": s,
                       "dilation": d, "separable": bool(sep), "residual_panes": panes,
                       "dense": dense_out})
        xs = xs + [filters] if dense_out else [filters]
        cin = filters
    dec = sec.get("decoder", {})
    if not isinstance(dec, dict):
        fail(f"{arch}.decoder: must be a mapping")
    for kk in dec:
        if kk not in ("in_feats", "init", "n_classes"):
            fail(f"{arch}.decoder.{kk}: unknown option")
    if dec.get("in_feats", cin) != cin:
        fail(f"{arch}.decoder.in_feats: {dec.get('in_feats')!r}, the encoder's last block has "
             f"{cin} filters")
    return arch, {"in_feats": in_feats, "activation": act, "use_conv_masks": masks,
                  "blocks": blocks}


def parse_config(y, pad_leading):
    if not isinstance(y, dict):
        fail("the yaml is not a mapping")
    labels = y.get("labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(s, str) for s in labels):
        fail("labels: must be a non-empty list of strings")
    feats = parse_features(y)
    arch, enc = parse_encoder(y)
    if enc["in_feats"] != feats["n_filt"]:
        fail(f"encoder.in_feats: {enc['in_feats']}, but the front end makes "
             f"{feats['n_filt']} features (n_filt)")
    if pad_leading is None:
        pad_leading = 16 if arch == "jasper" else 0
    if not 0 <= pad_leading <= 1024:
        fail(f"--pad-leading {pad_leading}: must be in [0, 1024]")
    return {"format_version": MODEL_JSON_VERSION, "family": FAMILY, "arch": arch,
            "name": str(y.get("name", arch)), "features": feats, "pad_leading": pad_leading,
            "encoder": enc, "labels": labels, "blank": len(labels)}


# ---- weights -----------------------------------------------------------------------------------

def load_state_dict(path, use_ema):
    import torch
    try:
        ck = torch.load(path, map_location="cpu")
    except Exception as ex:  # torch raises many types for a bad file
        fail(f"{path}: cannot load checkpoint: {ex}")
    if isinstance(ck, dict) and "state_dict" in ck:
        key = "ema_state_dict" if use_ema and "ema_state_dict" in ck else "state_dict"
        sd = ck[key]
    else:
        key = None
        sd = ck
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        fail(f"{path}: {key or 'the file'} is not a state dict (a mapping of tensor names to "
             f"tensors)")
    out = {}
    for k, v in sd.items():  # as DLE's helpers.convert_v1_state_dict
        if k.startswith("acoustic_model.") or k.startswith("audio_preprocessor."):
            continue
        k = re.sub(r"^jasper_encoder\.encoder\.", "encoder.layers.", k)
        k = re.sub(r"^jasper_decoder\.decoder_layers\.", "decoder.layers.", k)
        out[k] = v
    return out, key


def expected_tensors(cfg):
    """{name: shape} of every weight DLE's model has for this config (buffers included)."""
    exp = {}
    mod = "conv" if cfg["arch"] == "jasper" else "mconv"

    def bn(prefix, c):
        for nm in ("weight", "bias", "running_mean", "running_var"):
            exp[f"{prefix}.{nm}"] = (c,)

    cin = cfg["encoder"]["in_feats"]
    for i, b in enumerate(cfg["encoder"]["blocks"]):
        c, k = b["filters"], b["kernel"]
        step = 5 if b["separable"] else 4
        for r in range(b["repeat"]):
            ci = cin if r == 0 else c
            base = f"encoder.layers.{i}.{mod}.{step * r}"
            if b["separable"]:
                exp[f"{base}.weight"] = (ci, 1, k)
                exp[f"encoder.layers.{i}.{mod}.{step * r + 1}.weight"] = (c, ci, 1)
                bn(f"encoder.layers.{i}.{mod}.{step * r + 2}", c)
            else:
                exp[f"{base}.weight"] = (c, ci, k)
                bn(f"encoder.layers.{i}.{mod}.{step * r + 1}", c)
        for p, cp in enumerate(b["residual_panes"]):
            exp[f"encoder.layers.{i}.res.{p}.0.weight"] = (c, cp, 1)
            bn(f"encoder.layers.{i}.res.{p}.1", c)
        cin = c
    exp["decoder.layers.0.weight"] = (cfg["blank"] + 1, cin, 1)
    exp["decoder.layers.0.bias"] = (cfg["blank"] + 1,)
    return exp


def check_tensors(sd, cfg):
    """Refuses missing, unexpected, wrongly shaped or non-finite tensors; returns {name: f32}."""
    exp = expected_tensors(cfg)
    for name, t in sd.items():
        if name.endswith(".num_batches_tracked"):
            continue
        if name not in exp:
            fail(f"tensor {name}: unexpected in the checkpoint for this configuration (shape "
                 f"{list(t.shape)}); the yaml does not describe this model")
    out = {}
    for name, shape in exp.items():
        if name not in sd:
            fail(f"tensor {name}: missing from the checkpoint (expected shape {list(shape)})")
        t = sd[name]
        if tuple(t.shape) != tuple(shape):
            fail(f"tensor {name}: expected shape {list(shape)}, checkpoint has {list(t.shape)}")
        if not t.is_floating_point():
            fail(f"tensor {name}: dtype {t.dtype} is not a floating-point type")
        a = t.detach().float().contiguous().numpy().astype("<f4", copy=False)
        if not np.all(np.isfinite(a)):
            fail(f"tensor {name}: holds NaN or infinite values")
        if name.endswith("running_var") and np.any(a < 0):
            fail(f"tensor {name}: negative variance")
        out[name] = a
    return out


# ---- writers -----------------------------------------------------------------------------------

def config_pbtxt(name, max_batch, dle):
    preferred = sorted({max(1, max_batch // 2), max_batch})
    if dle:  # DLE's jasper-*-ensemble: jasper-client.py reads input[0], input[1], output[0]
        io = ["input [", "  {", '    name: "AUDIO_SIGNAL"', "    data_type: TYPE_FP16",
              "    dims: [ -1 ]", "  },", "  {", '    name: "NUM_SAMPLES"',
              "    data_type: TYPE_INT32", "    dims: [ 1 ]", "  }", "]",
              "output [", "  {", '    name: "TRANSCRIPT"', "    data_type: TYPE_INT32",
              "    dims: [ -1 ]", "  }", "]"]
    else:
        io = ["input [", "  {", '    name: "WAV"', "    data_type: TYPE_FP32", "    dims: [ -1 ]",
              "  },", "  {", '    name: "WAV_LENS"', "    data_type: TYPE_INT32",
              "    dims: [ 1 ]", "  }", "]",
              "output [", "  {", '    name: "TRANSCRIPTS"', "    data_type: TYPE_STRING",
              "    dims: [ 1 ]", "  }", "]"]
    out = [f'name: "{name}"', 'backend: "hark"', f"max_batch_size: {max_batch}"] + io + [
        "dynamic_batching {", f"  preferred_batch_size: [ {', '.join(map(str, preferred))} ]",
        "  max_queue_delay_microseconds: 2000", "}",
        "instance_group [", "  {", "    count: 1", "    kind: KIND_CPU", "  }", "]",
        f'parameters {{ key: "family" value {{ string_value: "{FAMILY}" }} }}']
    return "\n".join(out) + "\n"


def convert(args):
    if not 1 <= args.max_batch_size <= 512:
        fail(f"--max-batch-size {args.max_batch_size}: must be in [1, 512] (hark's limit)")
    try:
        with open(args.config, encoding="utf-8") as f:
            y = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as ex:
        fail(f"{args.config}: cannot read the config: {ex}")
    cfg = parse_config(y, args.pad_leading)
    sd, key = load_state_dict(args.checkpoint, not args.no_ema)
    tensors = check_tensors(sd, cfg)

    name = entry_name(args.output, fail)
    meta = {"format": "hark", "family": FAMILY, "converter": "tools/convert_jasper.py",
            "converter_version": CONVERTER_VERSION,
            "source": os.path.basename(args.checkpoint), "state_dict": key or "(bare)"}
    out = write_entry(args.output, tensors, meta, cfg,
                      config_pbtxt(name, args.max_batch_size, args.triton_dle))
    n = sum(a.size for a in tensors.values())
    print(f"wrote {out}: {cfg['arch']}, {len(cfg['encoder']['blocks'])} blocks, "
          f"{len(tensors)} tensors, {n} values ({key or 'bare state dict'})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="DLE checkpoint (Checkpointer.save)")
    ap.add_argument("--config", required=True, help="DLE model yaml (jasper*.yaml, quartznet*.yaml)")
    ap.add_argument("--output", required=True, help="model directory to write")
    ap.add_argument("--no-ema", action="store_true",
                    help="load `state_dict` even when the checkpoint has `ema_state_dict`")
    ap.add_argument("--pad-leading", type=int, default=None,
                    help="zero feature frames put in front (default: Jasper 16, QuartzNet 0)")
    ap.add_argument("--max-batch-size", type=int, default=64,
                    help="config.pbtxt max_batch_size (preferred sizes: half of it and it)")
    ap.add_argument("--triton-dle", action="store_true",
                    help="config.pbtxt declares DLE's AUDIO_SIGNAL/NUM_SAMPLES -> TRANSCRIPT")
    args = ap.parse_args(argv)
    return run_convert("convert_jasper", convert, args)


if __name__ == "__main__":
    sys.exit(main())
