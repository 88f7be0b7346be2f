#!/usr/bin/env python3
"""Convert an NVIDIA DeepLearningExamples Tacotron2 checkpoint into a hark TTS model directory.

    DIR/config.pbtxt          Triton-style model config (backend "hark", family "tacotron2";
                              parameters `vocoder` when --vocoder is given)
    DIR/1/model.safetensors   every weight as float32, DLE's key names (no `module.`, no
                              BatchNorm `num_batches_tracked`)
    DIR/1/model.json          the model configuration (DLE's model_config keys) and the text
                              front end's name

--checkpoint: `checkpoint_Tacotron2_*.pt` as DLE's train.py saves it
(`{'epoch', 'config', 'state_dict', ...}`): the model configuration is the checkpoint's own
`config`, as DLE's loaders read it; a bare state dict needs --config (a JSON file holding the
model_config keys, or the golden set's config.json with them under "model_config"). Any float
dtype is accepted (FP16 is widened exactly). Every tensor the config implies must be present
with its exact shape and finite values.
Generated weights (tests, benchmarks; no checkpoint, no torch): `--random SEED --config JSON`
fills every tensor with seeded values drawn as PyTorch's default initialisation draws them
(uniform in +-1/sqrt(fan_in); BatchNorm: weight near 1, bias and running mean near 0, running
variance in [0.5, 1.5]).
Needs Debian's python3-torch (checkpoints only) and python3-numpy.
Tests: tests/model/tacotron2/test_tacotron2.c, test_tacotron2_gpu.c
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np

from hark_entry import entry_name, fail, run_convert, tts_config_pbtxt, write_entry

FAMILY = "tacotron2"
MODEL_JSON_VERSION = 1
CONVERTER_VERSION = "1"
N_SYMBOLS = 148  # DLE's tacotron2/text symbols; the embedding has exactly this many rows


def _int(h, key, lo, hi):
    v = h.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        fail(f"config: {key} must be an integer in [{lo}, {hi}] (got {v!r})")
    return v


def _num(h, key, lo, hi):
    v = h.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= v <= hi:
        fail(f"config: {key} must be a number in [{lo}, {hi}] (got {v!r})")
    return float(v)


def parse_config(h):
    if isinstance(h, dict) and isinstance(h.get("model_config"), dict):
        h = h["model_config"]
    if not isinstance(h, dict):
        fail("config: not a mapping")
    cfg = {"format_version": MODEL_JSON_VERSION, "family": FAMILY,
           "text_front_end": "dle_tacotron2", "text_cleaners": "english_cleaners"}
    for key, lo, hi in (("n_mel_channels", 1, 1024), ("n_symbols", 1, 1 << 16),
                        ("symbols_embedding_dim", 1, 8192), ("encoder_kernel_size", 1, 63),
                        ("encoder_n_convolutions", 1, 16), ("encoder_embedding_dim", 2, 8192),
                        ("attention_rnn_dim", 1, 8192), ("attention_dim", 1, 8192),
                        ("attention_location_n_filters", 1, 1024),
                        ("attention_location_kernel_size", 1, 255),
                        ("n_frames_per_step", 1, 1), ("decoder_rnn_dim", 1, 8192),
                        ("prenet_dim", 1, 8192), ("max_decoder_steps", 1, 1 << 20),
                        ("postnet_embedding_dim", 1, 8192), ("postnet_kernel_size", 1, 63),
                        ("postnet_n_convolutions", 2, 64)):
        cfg[key] = _int(h, key, lo, hi)
    cfg["gate_threshold"] = _num(h, "gate_threshold", 0.0, 1.0)
    cfg["decoder_no_early_stopping"] = bool(h.get("decoder_no_early_stopping", False))
    cfg["mask_padding"] = bool(h.get("mask_padding", False))
    if cfg["n_symbols"] != N_SYMBOLS:
        fail(f"config: n_symbols {cfg['n_symbols']}: hark's text front end has {N_SYMBOLS} "
             f"symbols")
    if cfg["symbols_embedding_dim"] != cfg["encoder_embedding_dim"]:
        fail("config: symbols_embedding_dim must equal encoder_embedding_dim (the encoder "
             "convolutions read the embedding)")
    if cfg["encoder_embedding_dim"] % 2:
        fail("config: encoder_embedding_dim must be even (a bidirectional LSTM of half size)")
    for key in ("encoder_kernel_size", "postnet_kernel_size", "attention_location_kernel_size"):
        if cfg[key] % 2 == 0:
            fail(f"config: {key} {cfg[key]}: only odd kernels keep the length")
    cfg["sampling_rate"] = 22050  # DLE's arg_parser default; the checkpoint does not store it
    cfg["hop_length"] = 256
    return cfg


def expected_tensors(cfg):
    e, exp = cfg["encoder_embedding_dim"], {}
    exp["embedding.weight"] = (cfg["n_symbols"], cfg["symbols_embedding_dim"])

    def conv_bn(pre, cout, cin, k):
        exp[f"{pre}.0.conv.weight"] = (cout, cin, k)
        exp[f"{pre}.0.conv.bias"] = (cout,)
        for nm in ("weight", "bias", "running_mean", "running_var"):
            exp[f"{pre}.1.{nm}"] = (cout,)

    for i in range(cfg["encoder_n_convolutions"]):
        conv_bn(f"encoder.convolutions.{i}", e, e, cfg["encoder_kernel_size"])
    hh = e // 2
    for sfx in ("", "_reverse"):
        exp[f"encoder.lstm.weight_ih_l0{sfx}"] = (4 * hh, e)
        exp[f"encoder.lstm.weight_hh_l0{sfx}"] = (4 * hh, hh)
        exp[f"encoder.lstm.bias_ih_l0{sfx}"] = (4 * hh,)
        exp[f"encoder.lstm.bias_hh_l0{sfx}"] = (4 * hh,)
    nm, pd, ar, dr = (cfg["n_mel_channels"], cfg["prenet_dim"], cfg["attention_rnn_dim"],
                      cfg["decoder_rnn_dim"])
    ad = cfg["attention_dim"]
    exp["decoder.prenet.layers.0.linear_layer.weight"] = (pd, nm)
    exp["decoder.prenet.layers.1.linear_layer.weight"] = (pd, pd)
    exp["decoder.attention_rnn.weight_ih"] = (4 * ar, pd + e)
    exp["decoder.attention_rnn.weight_hh"] = (4 * ar, ar)
    exp["decoder.attention_rnn.bias_ih"] = (4 * ar,)
    exp["decoder.attention_rnn.bias_hh"] = (4 * ar,)
    al = "decoder.attention_layer"
    exp[f"{al}.query_layer.linear_layer.weight"] = (ad, ar)
    exp[f"{al}.memory_layer.linear_layer.weight"] = (ad, e)
    exp[f"{al}.v.linear_layer.weight"] = (1, ad)
    exp[f"{al}.location_layer.location_conv.conv.weight"] = (
        cfg["attention_location_n_filters"], 2, cfg["attention_location_kernel_size"])
    exp[f"{al}.location_layer.location_dense.linear_layer.weight"] = (
        ad, cfg["attention_location_n_filters"])
    exp["decoder.decoder_rnn.weight_ih"] = (4 * dr, ar + e)
    exp["decoder.decoder_rnn.weight_hh"] = (4 * dr, dr)
    exp["decoder.decoder_rnn.bias_ih"] = (4 * dr,)
    exp["decoder.decoder_rnn.bias_hh"] = (4 * dr,)
    exp["decoder.linear_projection.linear_layer.weight"] = (nm, dr + e)
    exp["decoder.linear_projection.linear_layer.bias"] = (nm,)
    exp["decoder.gate_layer.linear_layer.weight"] = (1, dr + e)
    exp["decoder.gate_layer.linear_layer.bias"] = (1,)
    pe, n = cfg["postnet_embedding_dim"], cfg["postnet_n_convolutions"]
    for i in range(n):
        conv_bn(f"postnet.convolutions.{i}", nm if i == n - 1 else pe, nm if i == 0 else pe,
                cfg["postnet_kernel_size"])
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
    # DLE's unwrap_distributed: 'module.1.' and 'module.' prefixes dropped
    sd = {re.sub(r"^module\.(1\.)?", "", k): v for k, v in sd.items()
          if not k.endswith("num_batches_tracked")}
    return sd, config


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
        if name.endswith("running_var") and np.any(a < 0):
            fail(f"tensor {name}: a negative running variance")
        out[name] = a
    return out


def random_state_dict(cfg, seed):
    """{name: float32 array} for every tensor the config implies, seeded, drawn as PyTorch's
    default initialisation draws them: uniform in +-1/sqrt(fan_in) (LSTMs: +-1/sqrt(hidden));
    BatchNorm weight near 1, bias and running mean near 0, running variance in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    exp = expected_tensors(cfg)
    out = {}
    for name, shape in exp.items():
        leaf = name.rsplit(".", 1)[1]
        if re.search(r"\.1\.(weight|bias|running_mean|running_var)$", name):  # BatchNorm
            lo, hi = {"weight": (0.8, 1.2), "bias": (-0.1, 0.1), "running_mean": (-0.1, 0.1),
                      "running_var": (0.5, 1.5)}[leaf]
            a = rng.uniform(lo, hi, shape)
        else:
            if re.match(r"(weight|bias)_(ih|hh)", leaf):  # LSTM: 1/sqrt(hidden)
                fan = shape[0] // 4
            else:
                w = shape if leaf == "weight" else exp.get(name.rsplit(".", 1)[0] + ".weight")
                fan = int(np.prod(w[1:])) if w is not None and len(w) > 1 else 1
            bound = 1.0 / np.sqrt(max(fan, 1))
            a = rng.uniform(-bound, bound, shape)
        out[name] = a.astype(np.float32)
    return out


def convert(args):
    if not 1 <= args.max_batch_size <= 512:
        fail(f"--max-batch-size {args.max_batch_size}: must be in [1, 512]")
    if args.vocoder and not re.fullmatch(r"[A-Za-z0-9_.\-/]+", args.vocoder):
        fail(f"--vocoder {args.vocoder!r}: use a model name or path of A-Z a-z 0-9 _ . - /")
    if (args.checkpoint is None) == (args.random is None):
        fail("give one of --checkpoint and --random")
    if args.random is not None:
        if not args.config:
            fail("--random needs --config")
        sd, config = None, None
    else:
        sd, config = load_checkpoint(args.checkpoint)
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as ex:
            fail(f"{args.config}: cannot read the config: {ex}")
    if config is None:
        fail(f"{args.checkpoint}: no saved 'config' in the checkpoint; give --config")
    cfg = parse_config(config)
    if args.max_decoder_steps:
        if not 1 <= args.max_decoder_steps <= 1 << 20:
            fail(f"--max-decoder-steps {args.max_decoder_steps}: must be in [1, 1048576]")
        cfg["max_decoder_steps"] = args.max_decoder_steps
    tensors = (random_state_dict(cfg, args.random) if args.random is not None
               else check_tensors(sd, cfg))

    name = entry_name(args.output, fail)
    meta = {"format": "hark", "family": FAMILY, "converter": "tools/convert_tacotron2.py",
            "converter_version": CONVERTER_VERSION,
            "source": (os.path.basename(args.checkpoint) if args.checkpoint
                       else f"random seed {args.random}")}
    out = write_entry(args.output, tensors, meta, cfg,
                      tts_config_pbtxt(name, args.max_batch_size, FAMILY, args.vocoder))
    n = sum(a.size for a in tensors.values())
    print(f"wrote {out}: tacotron2 encoder {cfg['encoder_embedding_dim']}, attention rnn "
          f"{cfg['attention_rnn_dim']}, decoder rnn {cfg['decoder_rnn_dim']}, {len(tensors)} "
          f"tensors, {n} values")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", help="DLE checkpoint_Tacotron2_*.pt")
    ap.add_argument("--random", type=int, metavar="SEED",
                    help="generated weights instead of a checkpoint (tests, benchmarks)")
    ap.add_argument("--config", help="model_config JSON (default: the checkpoint's 'config')")
    ap.add_argument("--output", required=True, help="model directory to write")
    ap.add_argument("--vocoder", help="vocoder model (name in the repository, or a directory)")
    ap.add_argument("--max-decoder-steps", type=int, default=0,
                    help="override the checkpoint's max_decoder_steps")
    ap.add_argument("--max-batch-size", type=int, default=8, help="config.pbtxt max_batch_size")
    args = ap.parse_args(argv)
    return run_convert("convert_tacotron2", convert, args)


if __name__ == "__main__":
    sys.exit(main())
