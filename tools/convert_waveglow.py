#!/usr/bin/env python3
"""Convert an NVIDIA DeepLearningExamples WaveGlow checkpoint into a hark vocoder model directory.

    DIR/config.pbtxt          Triton-style model config (backend "hark", family "waveglow")
    DIR/1/model.safetensors   the weights as float32, DLE's key names, prepared for inference:
                              weight norm removed (w = g * v / |v|, norm over every dim but 0, by
                              torch as DLE's remove_weightnorm does) and, beside each invertible
                              1x1 convolution's weight, its inverse `convinv.K.W_inverse` (C, C)
                              = W.float().inverse() as DLE's infer() computes it
    DIR/1/model.json          the model configuration (DLE's WaveGlow config keys) with hark's
                              inference defaults (sigma 0.9, denoiser strength 0.01, the
                              denoiser's STFT)

--checkpoint: `checkpoint_WaveGlow_*.pt` as DLE's train.py saves it (`{'epoch', 'config',
'state_dict', ...}`, weight_g / weight_v pairs): the configuration is the checkpoint's own
`config`, as DLE's loaders read it; a bare state dict needs --config (JSON with those keys, or
the golden set's config.json with them under "model_config"). FP16 tensors are widened exactly
before weight norm is removed in float32, as load_state_dict into DLE's FP32 model does.
The denoiser's bias spectrum is not stored: hark computes it at load, as DLE's Denoiser does.
Needs Debian's python3-torch and python3-numpy.
Tests: tests/model/waveglow/test_waveglow.c
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np

from hark_entry import entry_name, fail, run_convert, vocoder_config_pbtxt, write_entry

FAMILY = "waveglow"
MODEL_JSON_VERSION = 1
CONVERTER_VERSION = "1"


def _int(h, key, lo, hi):
    v = h.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        fail(f"config: {key} must be an integer in [{lo}, {hi}] (got {v!r})")
    return v


def parse_config(h, sigma, strength):
    if isinstance(h, dict) and isinstance(h.get("model_config"), dict):
        h = h["model_config"]
    if not isinstance(h, dict) or not isinstance(h.get("WN_config"), dict):
        fail("config: not a WaveGlow config (a mapping with WN_config)")
    wn = h["WN_config"]
    cfg = {"format_version": MODEL_JSON_VERSION, "family": FAMILY,
           "n_mel_channels": _int(h, "n_mel_channels", 1, 1024),
           "n_flows": _int(h, "n_flows", 1, 256),
           "n_group": _int(h, "n_group", 2, 256),
           "n_early_every": _int(h, "n_early_every", 1, 256),
           "n_early_size": _int(h, "n_early_size", 0, 256),
           "WN_config": {"n_layers": _int(wn, "n_layers", 1, 64),
                         "kernel_size": _int(wn, "kernel_size", 1, 63),
                         "n_channels": _int(wn, "n_channels", 2, 8192)}}
    if cfg["n_group"] % 2:
        fail(f"config: n_group {cfg['n_group']} must be even")
    if cfg["WN_config"]["kernel_size"] % 2 == 0:
        fail("config: WN kernel_size must be odd")
    if cfg["WN_config"]["n_channels"] % 2:
        fail("config: WN n_channels must be even")
    # DLE's WaveGlow: the upsampler is ConvTranspose1d(n_mel, n_mel, 1024, stride 256)
    cfg["upsample_kernel"] = 1024
    cfg["upsample_stride"] = 256
    cfg["sampling_rate"] = 22050
    cfg["sigma"] = sigma
    cfg["denoiser"] = {"strength": strength, "filter_length": 1024, "n_overlap": 4,
                       "win_length": 1024, "mode": "zeros", "bias_frames": 88}
    return cfg


def flow_channels(cfg):
    """Channels each flow k works on (DLE's WaveGlow.__init__)."""
    out, n_rem = [], cfg["n_group"]
    for k in range(cfg["n_flows"]):
        if k % cfg["n_early_every"] == 0 and k > 0:
            n_rem -= cfg["n_early_size"]
        out.append(n_rem)
    if n_rem < 2 or n_rem % 2:
        fail(f"config: the last flows work on {n_rem} channels (must be even and >= 2)")
    return out


def expected_tensors(cfg):
    nm, g = cfg["n_mel_channels"], cfg["n_group"]
    wn = cfg["WN_config"]
    c, k, nl = wn["n_channels"], wn["kernel_size"], wn["n_layers"]
    exp = {"upsample.weight": (nm, nm, cfg["upsample_kernel"]), "upsample.bias": (nm,)}
    for f, nc in enumerate(flow_channels(cfg)):
        half = nc // 2
        exp[f"convinv.{f}.conv.weight"] = (nc, nc, 1)
        b = f"WN.{f}"
        exp[f"{b}.start.weight"] = (c, half, 1)
        exp[f"{b}.start.bias"] = (c,)
        exp[f"{b}.end.weight"] = (2 * half, c, 1)
        exp[f"{b}.end.bias"] = (2 * half,)
        for i in range(nl):
            exp[f"{b}.in_layers.{i}.weight"] = (2 * c, c, k)
            exp[f"{b}.in_layers.{i}.bias"] = (2 * c,)
            exp[f"{b}.cond_layers.{i}.weight"] = (2 * c, nm * g, 1)
            exp[f"{b}.cond_layers.{i}.bias"] = (2 * c,)
            rs = 2 * c if i < nl - 1 else c
            exp[f"{b}.res_skip_layers.{i}.weight"] = (rs, c, 1)
            exp[f"{b}.res_skip_layers.{i}.bias"] = (rs,)
    return exp


def load_checkpoint(path):
    import torch
    try:
        ck = torch.load(path, map_location="cpu")
    except Exception as ex:  # torch raises many types for a bad file
        fail(f"{path}: cannot load checkpoint: {ex}")
    config = None
    sd = ck
    if isinstance(ck, dict) and "state_dict" in ck:
        sd, config = ck["state_dict"], ck.get("config")
    if not isinstance(sd, dict) or not sd or not all(
            isinstance(v, torch.Tensor) for v in sd.values()):
        fail(f"{path}: the checkpoint holds no state dict (a mapping of tensor names to tensors)")
    sd = {re.sub(r"^module\.(1\.)?", "", k): v for k, v in sd.items()}
    return sd, config


def remove_weight_norm(sd):
    """weight_g / weight_v pairs -> weight: torch._weight_norm over the float32 values."""
    import torch
    out, n = {}, 0
    for key, v in sd.items():
        if key.endswith(".weight_v"):
            if key[:-1] + "g" not in sd:
                fail(f"tensor {key}: its weight_g is missing")
            continue
        if key.endswith(".weight_g"):
            base = key[:-len(".weight_g")]
            vk = base + ".weight_v"
            if vk not in sd:
                fail(f"tensor {key}: its weight_v is missing")
            g, vv = v.float(), sd[vk].float()
            if g.dim() != vv.dim() or g.shape[0] != vv.shape[0]:
                fail(f"tensor {key}: shape {list(g.shape)} does not fit {vk} {list(vv.shape)}")
            out[base + ".weight"] = torch._weight_norm(vv, g, 0)
            n += 1
        else:
            out[key] = v
    return out, n


def check_tensors(sd, cfg):
    exp = expected_tensors(cfg)
    for name, t in sd.items():
        if name not in exp:
            fail(f"tensor {name}: unexpected for this config (shape {list(t.shape)})")
    out = {}
    for name, shape in exp.items():
        if name not in sd:
            fail(f"tensor {name}: missing from the checkpoint (expected shape {list(shape)})")
        t = sd[name]
        if tuple(t.shape) != tuple(shape):
            fail(f"tensor {name}: expected shape {list(shape)}, checkpoint has {list(t.shape)}")
        if not t.is_floating_point():
            fail(f"tensor {name}: dtype {t.dtype} is not a floating-point type")
        t = t.detach().float().contiguous()
        a = t.numpy().astype("<f4", copy=False)
        if not np.all(np.isfinite(a)):
            fail(f"tensor {name}: holds NaN or infinite values")
        out[name] = a
        m = re.fullmatch(r"convinv\.(\d+)\.conv\.weight", name)
        if m:
            w = t.squeeze(-1)
            try:
                inv = w.float().inverse()  # what DLE's Invertible1x1Conv(reverse=True) uses
            except RuntimeError as ex:
                fail(f"tensor {name}: the 1x1 convolution is not invertible ({ex})")
            ia = inv.contiguous().numpy().astype("<f4", copy=False)
            if not np.all(np.isfinite(ia)):
                fail(f"tensor {name}: its inverse is not finite")
            out[f"convinv.{m.group(1)}.W_inverse"] = ia
    return out


def convert(args):
    if not 1 <= args.max_batch_size <= 512:
        fail(f"--max-batch-size {args.max_batch_size}: must be in [1, 512]")
    if not 0 <= args.sigma <= 10:
        fail(f"--sigma {args.sigma}: must be in [0, 10]")
    if not 0 <= args.denoiser_strength <= 10:
        fail(f"--denoiser-strength {args.denoiser_strength}: must be in [0, 10]")
    sd, config = load_checkpoint(args.checkpoint)
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as ex:
            fail(f"{args.config}: cannot read the config: {ex}")
    if config is None:
        fail(f"{args.checkpoint}: no saved 'config' in the checkpoint; give --config")
    cfg = parse_config(config, args.sigma, args.denoiser_strength)
    sd, n_wn = remove_weight_norm(sd)
    tensors = check_tensors(sd, cfg)

    name = entry_name(args.output, fail)
    meta = {"format": "hark", "family": FAMILY, "converter": "tools/convert_waveglow.py",
            "converter_version": CONVERTER_VERSION,
            "source": os.path.basename(args.checkpoint),
            "weight_norm_removed": str(n_wn)}
    out = write_entry(args.output, tensors, meta, cfg,
                      vocoder_config_pbtxt(name, args.max_batch_size, FAMILY, cfg['n_mel_channels']))
    n = sum(a.size for a in tensors.values())
    print(f"wrote {out}: waveglow {cfg['n_flows']} flows, WN {cfg['WN_config']['n_layers']}x"
          f"{cfg['WN_config']['n_channels']}, {len(tensors)} tensors, {n} values, {n_wn} weight "
          f"norms removed")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="DLE checkpoint_WaveGlow_*.pt")
    ap.add_argument("--config", help="config JSON (default: the checkpoint's 'config')")
    ap.add_argument("--output", required=True, help="model directory to write")
    ap.add_argument("--sigma", type=float, default=0.9, help="default sigma (inference.py: 0.9)")
    ap.add_argument("--denoiser-strength", type=float, default=0.01,
                    help="default denoiser strength (inference.py: 0.01; 0 = off)")
    ap.add_argument("--max-batch-size", type=int, default=8, help="config.pbtxt max_batch_size")
    args = ap.parse_args(argv)
    return run_convert("convert_waveglow", convert, args)


if __name__ == "__main__":
    sys.exit(main())
