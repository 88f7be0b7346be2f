#!/usr/bin/env python3
# icefall_zipformer_reference.py — reference outputs of icefall's own zipformer (Zipformer2) recipe
# code for a model configuration of your choice (random seeded weights), to check hark's CPU
# zipformer against icefall number for number.
# Tests: tests/model/icefall/test_icefall_zipformer.c, tests/model/icefall/test_icefall_stream.c
# (run it when $HARK_ICEFALL_SRC is set).
"""Reference outputs of icefall's zipformer recipe for one configuration.

    icefall_zipformer_reference.py --icefall-root SRC --wav FILE.wav --out DIR
        [--seed 7] [--blank-shift 0] [--logit-scale 2.5] [--encoder-proj-scale 1] [--streaming]
        [--shims ../shared/tools/icefall] [--vocab-size 500]
        [the recipe's model flags: --num-encoder-layers 2,2,3,4,3,2 --downsampling-factor ...
         --feedforward-dim ... --num-heads ... --encoder-dim ... --query-head-dim ...
         --value-head-dim ... --pos-head-dim ... --pos-dim ... --encoder-unmasked-dim ...
         --cnn-module-kernel ... --decoder-dim ... --joiner-dim ... --context-size ...
         --causal ... --chunk-size ... --left-context-frames ...]

SRC is an icefall source tree (`icefall/` and `egs/librispeech/ASR/`, as the T1 README's
"Regenerating" section extracts it); it runs on Debian's python3-torch through the import shims
of ../shared/tools/icefall (k2, lhotse, kaldifeat stubbed; python3-packaging needed). The model
flags are parsed by the recipe's own train.add_model_arguments (so their spelling and defaults
are icefall's) and the model is built by train.get_model. Its weights are icefall's seeded
initialisation, then perturbed from a second seeded generator so that every stored value matters:
every bias outside encoder_embed's convolutions N(0, 0.02^2) (BiasNorm biases N(0, 0.1^2)), every
bypass_scale U(0.3, 0.9) per channel, SimpleDownsample biases N(0, 0.5^2), BiasNorm log_scale
+ N(0, 0.1^2), ChunkCausalDepthwiseConv1d chunkwise_conv_scale N(0, 0.1^2). Then the joiner alone is
calibrated on the utterance (deterministic; see calibrate(): encoder_proj centred and scaled to
--encoder-proj-scale time-std, output_linear to a logit std of --logit-scale, the blank bias
shifted for a useful blank fraction), so that the searches emit a useful number of distinct
tokens; the checkpoint is saved after that.

DIR receives pretrained.pt ({"model": state_dict}, as export.py writes it), fbank.npy (the
icefall pretrained.py fbank, via torchaudio's Kaldi fbank with kaldifeat's options),
encoder_embed_out.npy (T_embed, encoder_dim[0]), stack{i}_out.npy (T_embed, encoder_dim[i]: each
stack's output at the embed frame rate, after its bypass), encoder_out.npy (model.forward_encoder,
(T', max(encoder_dim))), and ref.json: greedy_search_batch tokens, timestamps and the smallest
top1-top2 logit margin, modified_beam_search (beam 4) tokens and timestamps, the configuration,
the joiner's calibration. --streaming (a causal model with one --chunk-size and
--left-context-frames) also decodes the utterance chunk by chunk exactly as icefall's
streaming_decode.py does for one stream (DecodeStream with tail_pad_len 30, decode_one_chunk,
greedy search, then again with modified_beam_search, num_active_paths 4): stream_encoder_out.npy
holds every chunk's encoder output one after the other, ref.json["streaming"] the number of
chunks, the greedy tokens (greedy_tokens) and modified_beam_search's
(modified_beam_search_tokens).
"""

import argparse
import json
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)


def calibrate(model, x, a, torch, greedy_search_batch):
    """The joiner only, deterministic, from this utterance (random weights give near-constant
    logits): encoder_proj centred over the frames (its bias cancels the mean) and scaled to unit
    time-std, times --encoder-proj-scale; output_linear scaled to a logit std of --logit-scale;
    then the blank bias shifted by the value of {-8, -7.5, ..., 8} (+ --blank-shift) that gives
    the most distinct greedy tokens with a blank fraction in [0.3, 0.8] (else the fraction
    nearest 0.55)."""
    j = model.joiner
    with torch.no_grad():
        enc, lens = model.forward_encoder(x, torch.tensor([x.shape[1]]))
        e = enc[0]
        ep = torch.nn.functional.linear(e, j.encoder_proj.weight)
        sd = float(ep.std(dim=0).mean())
        k = a.encoder_proj_scale / max(sd, 1e-6)
        j.encoder_proj.weight.mul_(k)
        j.encoder_proj.bias.copy_(-ep.mean(dim=0) * k)
        dec = model.decoder(torch.tensor([[-1] * (model.decoder.context_size - 1) + [0]]),
                            need_pad=False)
        lg = j(j.encoder_proj(e).unsqueeze(0), j.decoder_proj(dec), project_input=False)
        ls = a.logit_scale / max(float(lg.std()), 1e-6)
        j.output_linear.weight.mul_(ls)
        j.output_linear.bias.mul_(ls)
        base = float(j.output_linear.bias[0])
        best = None
        T = int(lens[0])
        for i in range(33):
            shift = -8.0 + 0.5 * i + a.blank_shift
            j.output_linear.bias[0] = base + shift
            hyp = greedy_search_batch(model=model, encoder_out=enc, encoder_out_lens=lens)[0]
            frac = 1.0 - len(hyp) / T
            ok = 0.3 <= frac <= 0.8
            key = (ok, len(set(hyp)) if ok else -abs(frac - 0.55))
            if best is None or key > best[0]:
                best = (key, shift, frac, len(set(hyp)))
        j.output_linear.bias[0] = base + best[1]
    return {"encoder_proj_scale": k, "logit_scale": ls, "blank_shift": best[1],
            "blank_fraction": best[2], "distinct_tokens": best[3]}


def run_streaming(model, params, feats, torch, streaming_decode, DecodeStream,
                  method="greedy_search"):
    """icefall's streaming_decode.py on one stream: DecodeStream.set_features with tail_pad_len
    30, decode_one_chunk until the stream is done (greedy_search, or modified_beam_search with
    num_active_paths 4); every chunk's encoder output is recorded (streaming_forward wrapped)."""
    cpu = torch.device("cpu")
    params.decoding_method = method
    params.num_active_paths = 4
    model.device = cpu
    states = streaming_decode.get_init_states(model=model, batch_size=1, device=cpu)
    stream = DecodeStream(params=params, cut_id="utt", initial_states=states,
                          decoding_graph=None, device=cpu)
    stream.set_features(feats, tail_pad_len=30)
    chunks = []
    inner = streaming_decode.streaming_forward

    def recording(**kw):
        res = inner(**kw)
        chunks.append(res[0][0].detach().clone())
        return res

    streaming_decode.streaming_forward = recording
    with torch.no_grad():
        while not stream.done:
            streaming_decode.decode_one_chunk(params=params, model=model,
                                              decode_streams=[stream])
    streaming_decode.streaming_forward = inner
    enc = torch.cat(chunks, dim=0)
    return {"encoder_out": enc.numpy(), "num_chunks": len(chunks),
            "chunk_frames": int(chunks[0].shape[0]),
            "tokens": [int(t) for t in stream.decoding_result()]}


def import_recipe(icefall_root, shims, streaming=False):
    """icefall's zipformer recipe modules, imported from the source tree icefall_root through
    the import shims in the folder `shims` (k2, lhotse, kaldifeat stubbed): a dict of numpy,
    torch, torchaudio, train, greedy_search_batch, modified_beam_search and, with streaming,
    streaming_decode and DecodeStream. Also used by bench/icefall_zf_peer.py."""
    recipe = os.path.join(os.path.abspath(icefall_root), "egs", "librispeech", "ASR",
                          "zipformer")
    if not os.path.isdir(recipe):
        sys.exit(f"icefall_zipformer_reference: {recipe}: not an icefall source tree")
    sys.path.insert(0, os.path.abspath(shims))
    import icefall_shims
    icefall_shims.install()
    try:
        import sentencepiece  # noqa: F401  (train.py imports it; unused here)
    except ImportError:
        sp = types.ModuleType("sentencepiece")
        sp.SentencePieceProcessor = object
        sys.modules["sentencepiece"] = sp
    sys.path.insert(0, os.path.abspath(icefall_root))
    sys.path.insert(0, recipe)
    cwd = os.getcwd()
    os.chdir(recipe)
    try:
        import numpy
        import torch
        import torchaudio
        import train
        from beam_search import greedy_search_batch, modified_beam_search
        r = dict(numpy=numpy, torch=torch, torchaudio=torchaudio, train=train,
                 greedy_search_batch=greedy_search_batch,
                 modified_beam_search=modified_beam_search)
        if streaming:
            import streaming_decode
            from decode_stream import DecodeStream
            r.update(streaming_decode=streaming_decode, DecodeStream=DecodeStream)
    finally:
        os.chdir(cwd)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=False)
    ap.add_argument("--icefall-root", required=True)
    ap.add_argument("--wav", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shims", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                    "shared", "tools", "icefall"))
    ap.add_argument("--vocab-size", type=int, default=500)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--blank-shift", type=float, default=0.0)
    ap.add_argument("--logit-scale", type=float, default=2.5)
    ap.add_argument("--encoder-proj-scale", type=float, default=1.0)
    ap.add_argument("--streaming", action="store_true",
                    help="also decode chunk by chunk as icefall's streaming_decode.py does "
                    "(a causal model with one --chunk-size and --left-context-frames)")
    a, rest = ap.parse_known_args()

    wav_path, out = os.path.abspath(a.wav), os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    r = import_recipe(a.icefall_root, a.shims, a.streaming)
    np, torch, torchaudio, train = r["numpy"], r["torch"], r["torchaudio"], r["train"]
    greedy_search_batch, modified_beam_search = r["greedy_search_batch"], r["modified_beam_search"]
    streaming_decode, DecodeStream = r.get("streaming_decode"), r.get("DecodeStream")

    mp = argparse.ArgumentParser(prog="icefall_zipformer_reference.py (model flags)")
    train.add_model_arguments(mp)
    mp.add_argument("--context-size", type=int, default=2)
    margs = mp.parse_args(rest)

    torch.manual_seed(a.seed)
    params = train.get_params()
    params.update(vars(margs))
    params.update(dict(vocab_size=a.vocab_size, blank_id=0, use_transducer=True, use_ctc=False,
                       use_attention_decoder=False))
    model = train.get_model(params)
    g = torch.Generator().manual_seed(a.seed + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bypass_scale"):
                p.copy_(0.3 + 0.6 * torch.rand(p.shape, generator=g))
            elif n.endswith("chunkwise_conv_scale"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif n.endswith("log_scale"):
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
            elif n.endswith("norm.bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif (n.endswith("downsample.bias") or n == "encoder.downsample_output.bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif n.endswith(".bias") and not n.startswith("encoder_embed."):
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    model.eval()

    wav, sr = torchaudio.load(wav_path)
    if sr != 16000 or wav.shape[0] != 1:
        sys.exit(f"icefall_zipformer_reference: {wav_path}: expected 16 kHz mono")
    feats = torchaudio.compliance.kaldi.fbank(
        wav, sample_frequency=16000, frame_length=25, frame_shift=10, dither=0.0,
        snip_edges=False, num_mel_bins=80, low_freq=20, high_freq=-400, energy_floor=0.0)
    np.save(os.path.join(out, "fbank.npy"), feats.numpy())
    x = feats.unsqueeze(0)
    calib = calibrate(model, x, a, torch, greedy_search_batch)
    torch.save({"model": model.state_dict()}, os.path.join(out, "pretrained.pt"))
    stacks = {}
    hooks = []
    for i, mod in enumerate(model.encoder.encoders):
        hooks.append(mod.register_forward_hook(
            lambda m, inp, o, i=i: stacks.__setitem__(i, o[:, 0].detach().clone())))
    with torch.no_grad():
        emb, _ = model.encoder_embed(x, torch.tensor([x.shape[1]]))
        enc, enc_lens = model.forward_encoder(x, torch.tensor([x.shape[1]]))
        gr = greedy_search_batch(model=model, encoder_out=enc, encoder_out_lens=enc_lens,
                                 return_timestamps=True)
        mb = modified_beam_search(model=model, encoder_out=enc, encoder_out_lens=enc_lens,
                                  beam=4, return_timestamps=True)
        # the smallest top1-top2 margin of greedy's logits (how far from a tie each choice is)
        cs = model.decoder.context_size
        ctx = [-1] * (cs - 1) + [0]
        ep = model.joiner.encoder_proj(enc[0])
        margin, k = float("inf"), 0
        for t in range(int(enc_lens[0])):
            dec = model.decoder(torch.tensor([ctx[-cs:]]), need_pad=False)
            lg = model.joiner(ep[t:t + 1].unsqueeze(1), model.joiner.decoder_proj(dec),
                              project_input=False)[0, 0]
            top = lg.topk(2).values
            margin = min(margin, float(top[0] - top[1]))
            if k < len(gr.hyps[0]) and gr.timestamps[0][k] == t:
                ctx.append(gr.hyps[0][k])
                k += 1
    for h in hooks:
        h.remove()
    stream = None
    if a.streaming:
        stream = run_streaming(model, params, feats, torch, streaming_decode, DecodeStream)
        np.save(os.path.join(out, "stream_encoder_out.npy"), stream.pop("encoder_out"))
        stream["greedy_tokens"] = stream.pop("tokens")
        mbs = run_streaming(model, params, feats, torch, streaming_decode, DecodeStream,
                            "modified_beam_search")
        stream["modified_beam_search_tokens"] = mbs["tokens"]
    np.save(os.path.join(out, "encoder_embed_out.npy"), emb[0].numpy())
    for i in sorted(stacks):
        np.save(os.path.join(out, f"stack{i}_out.npy"), stacks[i].numpy())
    np.save(os.path.join(out, "encoder_out.npy"), enc[0].numpy())
    T = int(enc_lens[0])
    ref = {"calibration": calib, "config": {"model_flags": rest, "seed": a.seed, "blank_shift": a.blank_shift,
                      "logit_scale": a.logit_scale, "encoder_proj_scale": a.encoder_proj_scale,
                      "vocab_size": a.vocab_size,
                      "params": {k: v for k, v in vars(margs).items()}},
           "wav": os.path.basename(wav_path), "fbank_frames": int(x.shape[1]),
           "encoder_out_len": T,
           "greedy_search": {"tokens": list(gr.hyps[0]), "timestamps": list(gr.timestamps[0]),
                             "min_top1_top2_margin": margin},
           "modified_beam_search": {"tokens": list(mb.hyps[0]),
                                    "timestamps": list(mb.timestamps[0])}}
    if stream is not None:
        ref["streaming"] = stream
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(ref, f)
    print(f"wrote {out}: T' {T}, greedy {len(gr.hyps[0])} tokens "
          f"({len(set(gr.hyps[0]))} distinct, min margin {margin:.4f}), "
          f"modified_beam_search {len(mb.hyps[0])}")


if __name__ == "__main__":
    main()
