#!/usr/bin/env python3
# icefall_zf_peer.py — the baseline of bench/icefall_stream.sh: icefall's own streaming Zipformer
# step (the zipformer recipe's streaming_decode.streaming_forward: encoder_embed.streaming_forward
# + encoder.streaming_forward over B streams' stacked states) on the same GPU, with the same
# checkpoint hark converted, timed as `hark bench --chunk` times hark's: B streams of one chunk
# each per step, host features in, encoder frames back on the host.
# Check: --check runs B streams of different random features through the batched steps and each
# stream alone, and compares their encoder frames (the batching is icefall's, not ours).
"""Times icefall's streaming Zipformer step.

    icefall_zf_peer.py --icefall-root SRC --checkpoint CKPT.pt [--shims DIR]
        [--batches 1,64,256] [--modes fp32,fp16] [--steps 40] [--min-time 2]
        [--device cuda] [--check] [the recipe's model flags: --causal True --chunk-size 16
         --left-context-frames 128 ...]

One JSON line per (mode, batch): ms_per_step (median), p99_ms, streams_real_time (B x chunk
duration / median), peak_mem_mb. fp16 is torch.autocast over the step.
"""

import argparse
import contextlib
import json
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tools"))

from icefall_zipformer_reference import import_recipe  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=False)
    ap.add_argument("--icefall-root", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--shims", default=os.path.join(here, "..", "..", "shared", "tools",
                                                    "icefall"))
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--modes", default="fp32,fp16")
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--vocab-size", type=int, default=500)
    ap.add_argument("--check", action="store_true")
    a, rest = ap.parse_known_args()
    r = import_recipe(a.icefall_root, a.shims, streaming=True)
    torch, train, sd_mod = r["torch"], r["train"], r["streaming_decode"]
    mp = argparse.ArgumentParser(prog="icefall_zf_peer.py (model flags)")
    train.add_model_arguments(mp)
    mp.add_argument("--context-size", type=int, default=2)
    margs = mp.parse_args(rest)
    params = train.get_params()
    params.update(vars(margs))
    params.update(dict(vocab_size=a.vocab_size, blank_id=0, use_transducer=True, use_ctc=False,
                       use_attention_decoder=False))
    model = train.get_model(params)
    ck = torch.load(a.checkpoint, map_location="cpu")
    missing, unexpected = model.load_state_dict(ck.get("model", ck), strict=False)
    # the generator writes no CTC / LM heads and a zero simple_am_proj: only those may differ
    bad = [k for k in missing + unexpected if not k.startswith(("simple_", "ctc_"))]
    if bad:
        sys.exit(f"icefall_zf_peer: checkpoint mismatch: {bad[:5]}")
    dev = torch.device(a.device)
    model.to(dev).eval()
    chunk = int(str(params.chunk_size).split(",")[0])
    left = int(str(params.left_context_frames).split(",")[0])
    t_in = 2 * chunk + 7 + 6  # pad_length 7 + 2 x 3 (the ConvNeXt's lookahead), as decode_one_chunk
    chunk_ms = chunk * 20.0

    def step(feats_host, states, B):
        x = feats_host.to(dev, non_blocking=True)
        lens = torch.full((B,), t_in, dtype=torch.int64, device=dev)
        enc, _, states = sd_mod.streaming_forward(features=x, feature_lens=lens, model=model,
                                                  states=states, chunk_size=chunk,
                                                  left_context_len=left)
        return enc.float().cpu(), states

    if a.check:
        g = torch.Generator().manual_seed(3)
        B, n = 3, 6
        feats = torch.randn(n, B, t_in, 80, generator=g) * 2
        with torch.no_grad():
            st = sd_mod.get_init_states(model=model, batch_size=B, device=dev)
            batched = []
            for k in range(n):
                e, st = step(feats[k], st, B)
                batched.append(e)
            worst = 0.0
            for b in range(B):
                s1 = sd_mod.get_init_states(model=model, batch_size=1, device=dev)
                for k in range(n):
                    e1, s1 = step(feats[k, b:b + 1], s1, 1)
                    d = float((e1[0] - batched[k][b]).abs().max() / batched[k][b].abs().max())
                    worst = max(worst, d)
        print(json.dumps({"check": "batched vs alone", "streams": B, "steps": n,
                          "max_rel_diff": worst}))
        if worst > 2e-5:
            sys.exit(1)
        return

    for mode in a.modes.split(","):
        for B in [int(b) for b in a.batches.split(",")]:
            g = torch.Generator().manual_seed(B)
            feats = (torch.rand(B, t_in, 80, generator=g) * 8 - 4).pin_memory() \
                if dev.type == "cuda" else torch.rand(B, t_in, 80, generator=g) * 8 - 4
            try:
                if dev.type == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                times = []
                amp = (torch.autocast(dev.type, dtype=torch.float16) if mode == "fp16"
                       else contextlib.nullcontext())
                with torch.no_grad(), amp:
                    st = sd_mod.get_init_states(model=model, batch_size=B, device=dev)
                    for _ in range(2):
                        _, st = step(feats, st, B)
                    t_start = time.perf_counter()
                    while True:
                        t0 = time.perf_counter()
                        _, st = step(feats, st, B)
                        times.append(time.perf_counter() - t0)
                        if time.perf_counter() - t_start > a.min_time and len(times) >= 20:
                            break
                times.sort()
                med, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
                peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else 0
                print(json.dumps({"impl": "icefall", "mode": mode, "streams": B,
                                  "chunk_ms": chunk_ms, "left_context_frames": left,
                                  "steps": len(times), "ms_per_step": med * 1e3,
                                  "p99_ms": p99 * 1e3,
                                  "streams_real_time": round(B * chunk_ms / (med * 1e3)),
                                  "peak_mem_mb": round(peak)}), flush=True)
            except RuntimeError as e:  # out of memory at a large batch: say so, go on
                print(json.dumps({"impl": "icefall", "mode": mode, "streams": B,
                                  "error": str(e).splitlines()[0][:200]}), flush=True)
                if dev.type == "cuda":
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
