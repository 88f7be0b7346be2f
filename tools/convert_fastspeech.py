#!/usr/bin/env python3
"""Convert an NVIDIA DeepLearningExamples FastSpeech checkpoint into a hark TTS model directory.

    DIR/config.pbtxt          Triton-style model config (backend "hark", family "fastspeech";
                              parameters `vocoder` when --vocoder is given)
    DIR/1/model.safetensors   every weight as float32 (--dtype float16: the matrices, kernels and
                              position tables as float16), DLE's key names without `module.`
    DIR/1/model.json          the hyper-parameters (d_model, FFT blocks, duration predictor, ...)

--checkpoint: `{'step', 'model': nn.DataParallel(model).state_dict()}` as DLE's trainer saves it
(a bare state dict is accepted too). --config: DLE's hparams yaml (base.yaml / infer.yaml: the
model keys are read, the rest ignored) or a JSON file with those keys under "hparams". Every
tensor the config implies must be present with its exact shape and finite values; the
positional tables must be the sinusoid DLE builds (checked to 1e-6).

Generated weights (benchmarks; no checkpoint, no torch): `--random SEED` in place of
`--checkpoint` fills the matrices with seeded uniform values of std 1/sqrt(fan_in), the layer
norms with 1 / 0, the positional tables with DLE's sinusoid, and sets the duration predictor to
about 5 frames per symbol (its linear weight small, its bias log(6)), LJSpeech's rate — e.g.
`--random 1 --config base` for DLE's full-size base.yaml model (built in as `base`).
Needs Debian's python3-torch (checkpoints only), python3-numpy, python3-yaml (yaml configs).
Tests: tests/model/fastspeech/test_fastspeech.c
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np

from hark_entry import entry_name, fail, narrow_weights, run_convert, tts_config_pbtxt, write_entry

FAMILY = "fastspeech"
MODEL_JSON_VERSION = 1
CONVERTER_VERSION = "1"
N_SYMBOLS = 148  # DLE's text_norm symbols; the embedding has one more row (padding_idx 0)


def _int(h, key, lo, hi, default=None):
    v = h.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        fail(f"config: {key} must be an integer in [{lo}, {hi}] (got {v!r})")
    return v


def parse_config(y):
    if isinstance(y, dict) and isinstance(y.get("hparams"), dict):
        h = dict(y["hparams"])
        audio = y.get("audio", {})
        for k_src, k_dst in (("sr", "sr"), ("hop_len", "hop_len")):
            if k_src in audio and k_dst not in h:
                h[k_dst] = audio[k_src]
    elif isinstance(y, dict):
        h = y
    else:
        fail("config: not a mapping")
    cfg = {"format_version": MODEL_JSON_VERSION, "family": FAMILY,
           "d_model": _int(h, "d_model", 2, 8192),
           "d_k": 64, "d_v": 64,  # hard-coded in DLE's Fastspeech
           "enc_layers": _int(h, "phoneme_side_n_layer", 1, 64),
           "enc_heads": _int(h, "phoneme_side_head", 1, 64),
           "enc_filter": _int(h, "phoneme_side_conv1d_filter_size", 1, 1 << 16),
           "dec_layers": _int(h, "mel_side_n_layer", 1, 64),
           "dec_heads": _int(h, "mel_side_head", 1, 64),
           "dec_filter": _int(h, "mel_side_conv1d_filter_size", 1, 1 << 16),
           "conv_kernel": _int(h, "fft_conv1d_kernel", 1, 31),
           "conv_padding": _int(h, "fft_conv1d_padding", 0, 15),
           "dp_filter": _int(h, "duration_predictor_filter_size", 1, 1 << 16),
           "dp_kernel": _int(h, "duration_predictor_kernel_size", 3, 3),
           "n_mels": _int(h, "n_mels", 1, 1024, h.get("num_mels", 80)),
           "max_seq_len": _int(h, "max_seq_len", 1, 1 << 20),
           "n_symbols": N_SYMBOLS + 1,
           "sample_rate": _int(h, "sr", 1000, 192000, 22050),
           "hop": _int(h, "hop_len", 1, 1 << 16, 256),
           "text_cleaners": "english_cleaners"}
    if 2 * cfg["conv_padding"] != cfg["conv_kernel"] - 1:
        fail(f"config: fft_conv1d_padding {cfg['conv_padding']} does not keep the length with "
             f"kernel {cfg['conv_kernel']}")
    for side in ("phoneme_side", "mel_side"):
        if h.get(f"{side}_output_size", cfg["d_model"]) != cfg["d_model"]:
            fail(f"config: {side}_output_size must equal d_model")
    cl = h.get("text_cleaners", ["english_cleaners"])
    if cl not in (["english_cleaners"], "english_cleaners"):
        fail(f"config: text_cleaners {cl!r}: hark implements english_cleaners only")
    return cfg


def expected_tensors(cfg):
    d, exp = cfg["d_model"], {}
    exp["word_emb.weight"] = (cfg["n_symbols"], d)
    for side, pre in (("enc", "phoneme_side"), ("dec", "mel_side")):
        exp[f"{pre}.position.weight"] = (cfg["max_seq_len"] + 1, d)
        nh, f, k = cfg[f"{side}_heads"], cfg[f"{side}_filter"], cfg["conv_kernel"]
        for i in range(cfg[f"{side}_layers"]):
            b = f"{pre}.layer_stack.{i}"
            exp[f"{b}.slf_attn.linear.weight"] = (nh * 192, d)
            exp[f"{b}.slf_attn.linear.bias"] = (nh * 192,)
            exp[f"{b}.slf_attn.layer_norm.weight"] = (d,)
            exp[f"{b}.slf_attn.layer_norm.bias"] = (d,)
            exp[f"{b}.slf_attn.fc.weight"] = (d, nh * 64)
            exp[f"{b}.slf_attn.fc.bias"] = (d,)
            exp[f"{b}.pos_ffn.w_1.weight"] = (f, d, k)
            exp[f"{b}.pos_ffn.w_1.bias"] = (f,)
            exp[f"{b}.pos_ffn.w_2.weight"] = (d, f, k)
            exp[f"{b}.pos_ffn.w_2.bias"] = (d,)
            exp[f"{b}.pos_ffn.layer_norm.weight"] = (d,)
            exp[f"{b}.pos_ffn.layer_norm.bias"] = (d,)
    dp, fd, kd = "length_regulator.duration_predictor", cfg["dp_filter"], cfg["dp_kernel"]
    exp[f"{dp}.conv1d_1.weight"] = (fd, d, kd)
    exp[f"{dp}.conv1d_1.bias"] = (fd,)
    exp[f"{dp}.layer_norm_1.weight"] = (fd,)
    exp[f"{dp}.layer_norm_1.bias"] = (fd,)
    exp[f"{dp}.conv1d_2.weight"] = (fd, fd, kd)
    exp[f"{dp}.conv1d_2.bias"] = (fd,)
    exp[f"{dp}.layer_norm_2.weight"] = (fd,)
    exp[f"{dp}.layer_norm_2.bias"] = (fd,)
    exp[f"{dp}.linear_layer.weight"] = (1, fd)
    exp[f"{dp}.linear_layer.bias"] = (1,)
    exp["mel_linear.weight"] = (cfg["n_mels"], d)
    exp["mel_linear.bias"] = (cfg["n_mels"],)
    return exp


# DLE's fastspeech/hparams/base.yaml (the model keys)
BUILTIN = {"base": {"max_seq_len": 2048, "d_model": 384, "phoneme_side_n_layer": 6,
                    "phoneme_side_head": 2, "phoneme_side_conv1d_filter_size": 1536,
                    "mel_side_n_layer": 6, "mel_side_head": 2,
                    "mel_side_conv1d_filter_size": 1536, "fft_conv1d_kernel": 3,
                    "fft_conv1d_padding": 1, "duration_predictor_filter_size": 256,
                    "duration_predictor_kernel_size": 3, "n_mels": 80, "sr": 22050,
                    "hop_len": 256}}


def random_tensors(cfg, seed):
    """{name: float32 array} for every tensor of the config: seeded, fan-in scaled matrices,
    unit layer norms, DLE's sinusoid tables, ~5 frames per symbol from the duration predictor."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in expected_tensors(cfg).items():
        if name.endswith("position.weight"):
            a = sinusoid_table(shape[0], shape[1])
        elif "layer_norm" in name:
            a = np.ones(shape) if name.endswith(".weight") else np.zeros(shape)
        elif name == "length_regulator.duration_predictor.linear_layer.bias":
            a = np.full(shape, np.log(6.0))
        elif name.endswith(".bias"):
            a = rng.uniform(-0.02, 0.02, size=shape)
        else:
            fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            scale = 0.05 if "linear_layer" in name else 1.0
            if name == "word_emb.weight":
                fan = 1
                scale = 0.3
            a = rng.uniform(-np.sqrt(3.0), np.sqrt(3.0), size=shape) * scale / np.sqrt(fan)
        out[name] = np.ascontiguousarray(a, dtype="<f4")
    return out


def sinusoid_table(n, d):
    pos = np.arange(n, dtype=np.float64)[:, None]
    i = np.arange(d)[None, :]
    t = pos / np.power(10000, 2 * (i // 2) / d)
    t[:, 0::2] = np.sin(t[:, 0::2])
    t[:, 1::2] = np.cos(t[:, 1::2])
    t[0] = 0.0
    return t.astype(np.float32)


def load_state_dict(path):
    import torch
    try:
        ck = torch.load(path, map_location="cpu")
    except Exception as ex:  # torch raises many types for a bad file
        fail(f"{path}: cannot load checkpoint: {ex}")
    key = None
    sd = ck
    if isinstance(ck, dict) and "model" in ck:
        key, sd = "model", ck["model"]
    if not isinstance(sd, dict) or not sd or not all(
            isinstance(v, torch.Tensor) for v in sd.values()):
        fail(f"{path}: {key or 'the file'} is not a state dict")
    return {re.sub(r"^module\.", "", k): v for k, v in sd.items()}, key


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
        a = t.detach().float().contiguous().numpy().astype("<f4", copy=False)
        if not np.all(np.isfinite(a)):
            fail(f"tensor {name}: holds NaN or infinite values")
        out[name] = a
    ref = sinusoid_table(cfg["max_seq_len"] + 1, cfg["d_model"])
    for pre in ("phoneme_side", "mel_side"):
        diff = float(np.max(np.abs(out[f"{pre}.position.weight"] - ref)))
        if diff > 1e-6:
            fail(f"tensor {pre}.position.weight: not DLE's sinusoid table (max diff {diff:g})")
    return out


def convert(args):
    if not 1 <= args.max_batch_size <= 512:
        fail(f"--max-batch-size {args.max_batch_size}: must be in [1, 512]")
    if args.vocoder and not re.fullmatch(r"[A-Za-z0-9_.\-/]+", args.vocoder):
        fail(f"--vocoder {args.vocoder!r}: use a model name or path of A-Z a-z 0-9 _ . - /")
    if args.config in BUILTIN:
        y = dict(BUILTIN[args.config])
    else:
        import yaml
        try:
            with open(args.config, encoding="utf-8") as f:
                y = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as ex:
            fail(f"{args.config}: cannot read the config: {ex}")
    cfg = parse_config(y)
    if (args.checkpoint is None) == (args.random is None):
        fail("give one of --checkpoint and --random")
    if args.random is not None:
        tensors, key = random_tensors(cfg, args.random), f"random seed {args.random}"
    else:
        sd, key = load_state_dict(args.checkpoint)
        tensors = check_tensors(sd, cfg)
    tensors = narrow_weights(tensors, args.dtype, fail)

    name = entry_name(args.output, fail)
    meta = {"format": "hark", "family": FAMILY, "converter": "tools/convert_fastspeech.py",
            "converter_version": CONVERTER_VERSION,
            "source": os.path.basename(args.checkpoint) if args.checkpoint else key,
            "state_dict": key or "(bare)", "dtype": args.dtype}
    out = write_entry(args.output, tensors, meta, cfg,
                      tts_config_pbtxt(name, args.max_batch_size, FAMILY, args.vocoder))
    n = sum(a.size for a in tensors.values())
    print(f"wrote {out}: fastspeech d_model {cfg['d_model']}, {cfg['enc_layers']}+"
          f"{cfg['dec_layers']} FFT blocks, {len(tensors)} tensors, {n} values")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", help="DLE FastSpeech checkpoint (.pt)")
    ap.add_argument("--random", type=int, metavar="SEED",
                    help="generated weights instead of a checkpoint (benchmarks)")
    ap.add_argument("--config", required=True,
                    help="DLE hparams yaml (or golden config.json), or base (DLE's base.yaml)")
    ap.add_argument("--output", required=True, help="model directory to write")
    ap.add_argument("--vocoder", help="vocoder model (name in the repository, or a directory)")
    ap.add_argument("--max-batch-size", type=int, default=8, help="config.pbtxt max_batch_size")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16"],
                    help="float16 stores the matrices and kernels (2+ dimensions) as float16 (half "
                         "the file); hark computes in float32 either way")
    args = ap.parse_args(argv)
    return run_convert("convert_fastspeech", convert, args)


if __name__ == "__main__":
    sys.exit(main())
