#!/usr/bin/env python3
# zipformer_random_ckpt.py — a zipformer transducer checkpoint of random (seeded) values with
# exactly the tensor names and shapes tools/convert_icefall.py expects for the model flags given,
# so the zipformer path can be tested without an icefall tree.
# Tests: tests/model/icefall/test_icefall_zipformer.c
"""zipformer_random_ckpt.py OUT.pt [--seed N] [the zipformer recipe's model flags]"""

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
    ap.add_argument("--vocab-size", type=int, default=500)
    ap.add_argument("--context-size", type=int, default=2)
    ap.add_argument("--blank-bias", type=float, default=8.0,
                    help="added to the joiner's blank logit (larger: fewer tokens)")
    for flag, typ, default in ci.ZIPFORMER_FLAGS:
        ap.add_argument(flag, type=typ, default=default)
    a = ap.parse_args()
    arch = ci.zipformer_arch(a)
    exp, _ = ci.zipformer_expected(arch, a.decoder_dim, a.joiner_dim, a.vocab_size,
                                   a.context_size)
    rng = np.random.default_rng(a.seed)
    sd = {}
    for name, shape in exp.items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if name.endswith("bypass_scale"):
            v = rng.uniform(0.3, 0.9, shape)
        elif name.endswith("log_scale"):
            v = rng.normal(0.0, 0.1, shape)
        elif name.endswith("chunkwise_conv_scale"):
            v = rng.normal(0.0, 0.1, shape)
        elif len(shape) <= 1:
            v = rng.normal(0.0, 0.1, shape)
        else:
            v = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
        sd[name] = torch.tensor(np.asarray(v, dtype=np.float32))
    # the joiner: a blank bias that lets some tokens through, larger logits
    sd["joiner.output_linear.weight"] *= 4.0
    sd["joiner.encoder_proj.weight"] *= 4.0
    sd["joiner.output_linear.bias"][0] += a.blank_bias
    sd["simple_am_proj.weight"] = torch.zeros(a.vocab_size, max(arch["encoder_dim"]))
    torch.save({"model": sd}, a.out)


if __name__ == "__main__":
    main()
