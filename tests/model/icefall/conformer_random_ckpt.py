#!/usr/bin/env python3
# conformer_random_ckpt.py — a pruned_transducer_stateless3 (Conformer) transducer checkpoint of
# random (seeded) values with exactly the tensor names and shapes tools/convert_icefall.py expects
# for the sizes given, so the Conformer's GPU path can be checked against the CPU path on
# configurations of any size without an icefall tree.
# Tests: tests/model/icefall/test_icefall_gpu.c
"""conformer_random_ckpt.py OUT.pt [--seed N] [--encoder-dim D] [--nhead H] ..."""

import argparse
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "..", "tools"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import convert_icefall as ci  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--encoder-dim", type=int, default=72)
    ap.add_argument("--nhead", type=int, default=3)
    ap.add_argument("--dim-feedforward", type=int, default=136)
    ap.add_argument("--num-encoder-layers", type=int, default=2)
    ap.add_argument("--cnn-module-kernel", type=int, default=15)
    ap.add_argument("--decoder-dim", type=int, default=40)
    ap.add_argument("--joiner-dim", type=int, default=56)
    ap.add_argument("--context-size", type=int, default=2)
    ap.add_argument("--vocab-size", type=int, default=500)
    ap.add_argument("--blank-bias", type=float, default=6.0,
                    help="added to the joiner's blank logit (larger: fewer tokens)")
    a = ap.parse_args()
    arch = {"feature_dim": 80, "encoder_dim": a.encoder_dim, "nhead": a.nhead,
            "dim_feedforward": a.dim_feedforward, "num_encoder_layers": a.num_encoder_layers,
            "cnn_module_kernel": a.cnn_module_kernel, "decoder_dim": a.decoder_dim,
            "context_size": a.context_size, "joiner_dim": a.joiner_dim,
            "vocab_size": a.vocab_size}
    rng = np.random.default_rng(a.seed)
    sd = {}
    for name, shape in ci.expected_tensors(arch).items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if name.endswith("eps"):  # BasicNorm keeps log(eps)
            v = rng.normal(np.log(0.25), 0.2, shape)
        elif name.endswith("scale"):  # the Scaled* modules' log scales
            v = rng.normal(0.0, 0.1, shape)
        elif len(shape) <= 1:
            v = rng.normal(0.0, 0.1, shape)
        else:
            v = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
        sd[name] = torch.tensor(np.asarray(v, dtype=np.float32))
    # larger logits and a blank bias that lets some tokens through
    sd["joiner.output_linear.weight"] *= 4.0
    sd["joiner.encoder_proj.weight"] *= 4.0
    sd["joiner.output_linear.bias"][0] += a.blank_bias
    torch.save({"model": sd}, a.out)


if __name__ == "__main__":
    main()
