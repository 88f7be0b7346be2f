#!/usr/bin/env python3
# icefall_reference.py — reference outputs of icefall's own pruned_transducer_stateless3 code for
# a model configuration of your choice (random seeded weights), to check hark on configurations
# the T1 goldens do not cover (other sizes, heads, context sizes).
# Tests: tests/model/icefall/test_icefall_config.c (runs it when $HARK_ICEFALL_SRC is set).
"""Reference outputs of icefall's pruned_transducer_stateless3 for one configuration.

    icefall_reference.py --icefall-root SRC --wav FILE.wav --out DIR
        [--encoder-dim 192] [--nhead 6] [--dim-feedforward 384] [--num-encoder-layers 2]
        [--decoder-dim 96] [--joiner-dim 128] [--context-size 3] [--seed 7] [--blank-shift 11]
        [--logit-scale 2] [--encoder-proj-scale 8] [--causal-convolution]
        [--simulate-streaming [--decode-chunk-size 16] [--left-context 64]]
        [--shims ../shared/tools/icefall]

SRC is an icefall source tree (`icefall/` and `egs/librispeech/ASR/`, as the T1 README's
"Regenerating" section extracts it); it runs on Debian's python3-torch through the import shims
of ../shared/tools/icefall (k2, lhotse, kaldifeat stubbed; python3-packaging needed). The model is
built by the recipe's train.get_transducer_model with the sizes given, its scales, biases and
pos_bias perturbed from a seeded generator (so every stored value matters) and the blank logit's
bias raised by --blank-shift, its output_linear scaled by --logit-scale and its encoder_proj by
--encoder-proj-scale (so the searches emit a useful number of distinct tokens).

DIR receives pretrained.pt ({"model": state_dict}, as export.py writes it), fbank.npy (the
icefall pretrained.py fbank, via torchaudio's Kaldi fbank with kaldifeat's options),
encoder_out.npy (model.encoder), and ref.json: greedy_search_batch tokens and timestamps,
modified_beam_search (beam 4) tokens and timestamps, the configuration.
"""

import argparse
import json
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--icefall-root", required=True)
    ap.add_argument("--wav", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shims", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                    "shared", "tools", "icefall"))
    ap.add_argument("--encoder-dim", type=int, default=192)
    ap.add_argument("--nhead", type=int, default=6)
    ap.add_argument("--dim-feedforward", type=int, default=384)
    ap.add_argument("--num-encoder-layers", type=int, default=2)
    ap.add_argument("--decoder-dim", type=int, default=96)
    ap.add_argument("--joiner-dim", type=int, default=128)
    ap.add_argument("--context-size", type=int, default=3)
    ap.add_argument("--vocab-size", type=int, default=500)
    ap.add_argument("--causal-convolution", action="store_true")
    ap.add_argument("--simulate-streaming", action="store_true",
                    help="encode as pretrained.py --simulate-streaming (needs causal convolution)")
    ap.add_argument("--decode-chunk-size", type=int, default=16)
    ap.add_argument("--left-context", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--blank-shift", type=float, default=11.0)
    ap.add_argument("--logit-scale", type=float, default=2.0)
    ap.add_argument("--encoder-proj-scale", type=float, default=8.0)
    a = ap.parse_args()

    recipe = os.path.join(os.path.abspath(a.icefall_root), "egs", "librispeech", "ASR",
                          "pruned_transducer_stateless3")
    if not os.path.isdir(recipe):
        sys.exit(f"icefall_reference: {recipe}: not an icefall source tree")
    sys.path.insert(0, os.path.abspath(a.shims))
    import icefall_shims
    icefall_shims.install()
    try:
        import sentencepiece  # noqa: F401  (train.py imports it; unused here)
    except ImportError:
        sp = types.ModuleType("sentencepiece")
        sp.SentencePieceProcessor = object
        sys.modules["sentencepiece"] = sp
    sys.path.insert(0, os.path.abspath(a.icefall_root))
    sys.path.insert(0, recipe)
    wav_path, out = os.path.abspath(a.wav), os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    cwd = os.getcwd()
    os.chdir(recipe)
    try:
        import numpy as np
        import torch
        import torchaudio
        import train
        from beam_search import greedy_search_batch, modified_beam_search
    finally:
        os.chdir(cwd)

    torch.manual_seed(a.seed)
    params = train.get_params()
    params.update(dict(encoder_dim=a.encoder_dim, nhead=a.nhead,
                       dim_feedforward=a.dim_feedforward,
                       num_encoder_layers=a.num_encoder_layers, decoder_dim=a.decoder_dim,
                       joiner_dim=a.joiner_dim, context_size=a.context_size,
                       vocab_size=a.vocab_size, blank_id=0, dynamic_chunk_training=False,
                       short_chunk_size=25, num_left_chunks=4,
                       causal_convolution=a.causal_convolution))
    model = train.get_transducer_model(params, enable_giga=False)
    g = torch.Generator().manual_seed(a.seed + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("_scale") or n.endswith(".scale") or n.endswith(".eps"):
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
            elif n.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif "pos_bias" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        # spread the logits (random weights give near-uniform ones) and favour the blank
        model.joiner.output_linear.weight_scale.add_(float(np.log(a.logit_scale)))
        model.joiner.encoder_proj.weight_scale.add_(float(np.log(a.encoder_proj_scale)))
        model.joiner.output_linear.bias[0] += a.blank_shift
    model.eval()
    torch.save({"model": model.state_dict()}, os.path.join(out, "pretrained.pt"))

    wav, sr = torchaudio.load(wav_path)
    if sr != 16000 or wav.shape[0] != 1:
        sys.exit(f"icefall_reference: {wav_path}: expected 16 kHz mono")
    feats = torchaudio.compliance.kaldi.fbank(
        wav, sample_frequency=16000, frame_length=25, frame_shift=10, dither=0.0,
        snip_edges=False, num_mel_bins=80, low_freq=20, high_freq=-400, energy_floor=0.0)
    np.save(os.path.join(out, "fbank.npy"), feats.numpy())
    x = feats.unsqueeze(0)
    with torch.no_grad():
        if a.simulate_streaming:
            enc, enc_lens, _ = model.encoder.streaming_forward(
                x=x, x_lens=torch.tensor([x.shape[1]]), chunk_size=a.decode_chunk_size,
                left_context=a.left_context, simulate_streaming=True)
        else:
            enc, enc_lens = model.encoder(x, torch.tensor([x.shape[1]]))
        gr = greedy_search_batch(model=model, encoder_out=enc, encoder_out_lens=enc_lens,
                                 return_timestamps=True)
        mb = modified_beam_search(model=model, encoder_out=enc, encoder_out_lens=enc_lens,
                                  beam=4, return_timestamps=True)
    np.save(os.path.join(out, "encoder_out.npy"), enc[0].numpy())
    ref = {"config": {k: getattr(a, k) for k in (
               "encoder_dim", "nhead", "dim_feedforward", "num_encoder_layers", "decoder_dim",
               "joiner_dim", "context_size", "vocab_size", "causal_convolution", "simulate_streaming",
               "decode_chunk_size", "left_context", "seed", "blank_shift", "logit_scale", "encoder_proj_scale")},
           "wav": os.path.basename(wav_path), "encoder_out_len": int(enc_lens[0]),
           "greedy_search": {"tokens": list(gr.hyps[0]), "timestamps": list(gr.timestamps[0])},
           "modified_beam_search": {"tokens": list(mb.hyps[0]),
                                    "timestamps": list(mb.timestamps[0])}}
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(ref, f)
    print(f"wrote {out}: T' {int(enc_lens[0])}, greedy {len(gr.hyps[0])} tokens, "
          f"modified_beam_search {len(mb.hyps[0])}")


if __name__ == "__main__":
    main()
