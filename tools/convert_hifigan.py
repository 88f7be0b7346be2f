#!/usr/bin/env python3
"""Convert a jik876/hifi-gan generator checkpoint into a hark vocoder model directory.

    DIR/config.pbtxt          Triton-style model config (backend "hark", family "hifigan")
    DIR/1/model.safetensors   the generator's weights as float32 (--dtype float16: the kernels as
                              float16, the biases float32) with weight norm removed
                              (w = g * v / |v|, norm over every dim but 0), upstream key names
    DIR/1/model.json          the generator and mel-recipe hyper-parameters (config_vN.json)

Accepted checkpoints:
  * `g_XXXXXXXX` as hifi-gan's train.py writes it: {'generator': state_dict} with
    weight_g / weight_v pairs;
  * a plain state dict whose weight norm is already removed (`*.weight`), any float dtype
    (e.g. the fp16 LJSpeech V3 weights taken from the TFLite file); fp16 is widened exactly.

Every tensor the config implies must be present with its exact shape and finite values.

Generated weights (benchmarks, tests; no checkpoint, no torch): `--random SEED` in place of
`--checkpoint` fills every tensor with seeded uniform values of std 1/sqrt(fan_in) (biases
0.05/sqrt(fan_in)) — e.g. `--random 1 --config v1` for a full-size V1 (upstream's config_v1.json,
built in as `v1`; `v3` too).
Needs Debian's python3-torch (checkpoints only) and python3-numpy. Tests: tests/model/hifigan/test_hifigan.c.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np

from hark_entry import entry_name, fail, narrow_weights, run_convert, vocoder_config_pbtxt, write_entry

FAMILY = "hifigan"
MODEL_JSON_VERSION = 1
CONVERTER_VERSION = "1"


# ---- config ----------------------------------------------------------------------------------

def _int(h, key, lo, hi):
    v = h.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        fail(f"config: {key} must be an integer in [{lo}, {hi}] (got {v!r})")
    return v


def _int_list(h, key, lo, hi):
    v = h.get(key)
    if not isinstance(v, list) or not v or not all(
            isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi for x in v):
        fail(f"config: {key} must be a non-empty list of integers in [{lo}, {hi}] (got {v!r})")
    return v


def parse_config(h):
    if not isinstance(h, dict):
        fail("config: not a JSON object")
    rb = str(h.get("resblock"))
    if rb not in ("1", "2"):
        fail(f"config: resblock must be \"1\" or \"2\" (got {h.get('resblock')!r})")
    ups = _int_list(h, "upsample_rates", 1, 64)
    upk = _int_list(h, "upsample_kernel_sizes", 1, 256)
    if len(ups) != len(upk):
        fail("config: upsample_rates and upsample_kernel_sizes differ in length")
    for u, k in zip(ups, upk):
        if k < u:
            fail(f"config: upsample kernel {k} is shorter than its rate {u}")
    ch = _int(h, "upsample_initial_channel", 2, 1 << 14)
    if ch % (1 << len(ups)):
        fail(f"config: upsample_initial_channel {ch} does not halve {len(ups)} times")
    rk = _int_list(h, "resblock_kernel_sizes", 1, 255)
    rd = h.get("resblock_dilation_sizes")
    n_d = 3 if rb == "1" else 2
    if not isinstance(rd, list) or len(rd) != len(rk) or not all(
            isinstance(d, list) and len(d) >= n_d and all(
                isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 1024 for x in d)
            for d in rd):
        fail(f"config: resblock_dilation_sizes must hold {len(rk)} lists of at least {n_d} "
             f"dilations (got {rd!r})")
    for k in rk:
        if k % 2 == 0:
            fail(f"config: resblock kernel {k}: only odd kernels keep the length")
    cfg = {
        "format_version": MODEL_JSON_VERSION, "family": FAMILY,
        "resblock": rb,
        "num_mels": h.get("num_mels", 80),
        "upsample_rates": ups, "upsample_kernel_sizes": upk,
        "upsample_initial_channel": ch,
        "resblock_kernel_sizes": rk,
        "resblock_dilation_sizes": [list(d[:n_d]) for d in rd],
        "sampling_rate": _int(h, "sampling_rate", 1000, 192000),
        "n_fft": _int(h, "n_fft", 16, 1 << 16),
        "hop_size": _int(h, "hop_size", 1, 1 << 16),
        "win_size": _int(h, "win_size", 1, 1 << 16),
        "fmin": h.get("fmin", 0),
        "fmax": h.get("fmax", 8000),
    }
    _int(cfg, "num_mels", 1, 1024)
    hop = 1
    for u in ups:
        hop *= u
    if hop != cfg["hop_size"]:
        fail(f"config: the upsample rates multiply to {hop}, not hop_size {cfg['hop_size']}")
    return cfg


def expected_tensors(cfg):
    """{name: shape} of every weight of jik876's Generator(h) after remove_weight_norm()."""
    exp = {}
    ch = cfg["upsample_initial_channel"]
    exp["conv_pre.weight"] = (ch, cfg["num_mels"], 7)
    exp["conv_pre.bias"] = (ch,)
    nk = len(cfg["resblock_kernel_sizes"])
    for i, k in enumerate(cfg["upsample_kernel_sizes"]):
        cin, cout = ch >> i, ch >> (i + 1)
        exp[f"ups.{i}.weight"] = (cin, cout, k)
        exp[f"ups.{i}.bias"] = (cout,)
        for j, kr in enumerate(cfg["resblock_kernel_sizes"]):
            base = f"resblocks.{i * nk + j}"
            names = ["convs"] if cfg["resblock"] == "2" else ["convs1", "convs2"]
            n = len(cfg["resblock_dilation_sizes"][j])
            for nm in names:
                for c in range(n):
                    exp[f"{base}.{nm}.{c}.weight"] = (cout, cout, kr)
                    exp[f"{base}.{nm}.{c}.bias"] = (cout,)
    cout = ch >> len(cfg["upsample_rates"])
    exp["conv_post.weight"] = (1, cout, 7)
    exp["conv_post.bias"] = (1,)
    return exp


# ---- weights ---------------------------------------------------------------------------------

def load_state_dict(path):
    import torch
    try:
        ck = torch.load(path, map_location="cpu")
    except Exception as ex:  # torch raises many types for a bad file
        fail(f"{path}: cannot load checkpoint: {ex}")
    key = None
    if isinstance(ck, dict) and "generator" in ck:
        key, sd = "generator", ck["generator"]
    else:
        sd = ck
    if not isinstance(sd, dict) or not sd or not all(
            isinstance(v, torch.Tensor) for v in sd.values()):
        fail(f"{path}: {key or 'the file'} is not a state dict (a mapping of tensor names to "
             f"tensors)")
    return sd, key


def remove_weight_norm(sd):
    """weight_g / weight_v pairs -> weight, computed by torch as remove_weight_norm does."""
    import torch
    out, wn = {}, 0
    for k, v in sd.items():
        if k.endswith(".weight_v"):
            continue
        if k.endswith(".weight_g"):
            base = k[:-len(".weight_g")]
            vk = base + ".weight_v"
            if vk not in sd:
                fail(f"tensor {k}: its weight_v is missing")
            g, vv = v.float(), sd[vk].float()
            if g.dim() != vv.dim() or g.shape[0] != vv.shape[0]:
                fail(f"tensor {k}: shape {list(g.shape)} does not fit {vk} {list(vv.shape)}")
            out[base + ".weight"] = torch._weight_norm(vv, g, 0)
            wn += 1
        else:
            out[k] = v
    for k in sd:
        if k.endswith(".weight_v") and k[:-1] + "g" not in sd:
            fail(f"tensor {k}: its weight_g is missing")
    return out, wn


def check_tensors(sd, cfg):
    exp = expected_tensors(cfg)
    for name, t in sd.items():
        if name not in exp:
            fail(f"tensor {name}: unexpected for this config (shape {list(t.shape)}); the config "
                 f"does not describe this generator")
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
        out[name] = a
    return out


# upstream's config_v1.json / config_v3.json (the generator and mel-recipe keys)
BUILTIN = {
    "v1": {"resblock": "1", "upsample_rates": [8, 8, 2, 2],
           "upsample_kernel_sizes": [16, 16, 4, 4], "upsample_initial_channel": 512,
           "resblock_kernel_sizes": [3, 7, 11],
           "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]]},
    "v3": {"resblock": "2", "upsample_rates": [8, 8, 4], "upsample_kernel_sizes": [16, 16, 8],
           "upsample_initial_channel": 256, "resblock_kernel_sizes": [3, 5, 7],
           "resblock_dilation_sizes": [[1, 2], [2, 6], [3, 12]]},
}
for _h in BUILTIN.values():
    _h.update({"num_mels": 80, "n_fft": 1024, "hop_size": 256, "win_size": 1024,
               "sampling_rate": 22050, "fmin": 0, "fmax": 8000})


def random_tensors(cfg, seed):
    """{name: float32 array} for every tensor the config implies, seeded, fan-in scaled."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in expected_tensors(cfg).items():
        if name.endswith(".bias"):
            fan = 1
            for nm2, sh2 in expected_tensors(cfg).items():
                if nm2 == name[:-5] + ".weight":
                    fan = sh2[0] * sh2[2] if nm2.startswith("ups.") else sh2[1] * sh2[2]
            scale = 0.05 / np.sqrt(fan)
        else:
            fan = shape[0] * shape[2] if name.startswith("ups.") else shape[1] * shape[2]
            scale = 1.0 / np.sqrt(fan)
        a = rng.uniform(-np.sqrt(3.0), np.sqrt(3.0), size=shape) * scale
        out[name] = np.ascontiguousarray(a, dtype="<f4")
    return out


# ---- conversion ------------------------------------------------------------------------------

def convert(args):
    if not 1 <= args.max_batch_size <= 512:
        fail(f"--max-batch-size {args.max_batch_size}: must be in [1, 512]")
    if args.config in BUILTIN:
        h = dict(BUILTIN[args.config])
    else:
        try:
            with open(args.config, encoding="utf-8") as f:
                h = json.load(f)
        except (OSError, ValueError) as ex:
            fail(f"{args.config}: cannot read the config: {ex}")
    cfg = parse_config(h)
    if (args.checkpoint is None) == (args.random is None):
        fail("give one of --checkpoint and --random")
    if args.random is not None:
        tensors, n_wn, key = random_tensors(cfg, args.random), 0, f"random seed {args.random}"
    else:
        sd, key = load_state_dict(args.checkpoint)
        sd, n_wn = remove_weight_norm(sd)
        tensors = check_tensors(sd, cfg)
    tensors = narrow_weights(tensors, args.dtype, fail)

    name = entry_name(args.output, fail)
    meta = {"format": "hark", "family": FAMILY, "converter": "tools/convert_hifigan.py",
            "converter_version": CONVERTER_VERSION,
            "source": os.path.basename(args.checkpoint) if args.checkpoint else key,
            "weight_norm_removed": str(n_wn), "dtype": args.dtype}
    out = write_entry(args.output, tensors, meta, cfg,
                      vocoder_config_pbtxt(name, args.max_batch_size, FAMILY, cfg['num_mels']))
    n = sum(a.size for a in tensors.values())
    print(f"wrote {out}: hifi-gan (resblock {cfg['resblock']}, upsample "
          f"{cfg['upsample_rates']}), {len(tensors)} tensors, {n} values, "
          f"{n_wn} weight norms removed ({key or 'bare state dict'})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", help="g_XXXXXXXX or a plain state dict")
    ap.add_argument("--random", type=int, metavar="SEED",
                    help="generated weights instead of a checkpoint (benchmarks, tests)")
    ap.add_argument("--config", required=True,
                    help="hifi-gan config_vN.json, or v1 / v3 (upstream's, built in)")
    ap.add_argument("--output", required=True, help="model directory to write")
    ap.add_argument("--max-batch-size", type=int, default=8, help="config.pbtxt max_batch_size")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16"],
                    help="float16 stores the kernels (2+ dimensions) as float16 (half the file; "
                         "exact for weights that were float16, as the LJSpeech V3's); hark "
                         "computes in float32 either way")
    args = ap.parse_args(argv)
    return run_convert("convert_hifigan", convert, args)


if __name__ == "__main__":
    sys.exit(main())
