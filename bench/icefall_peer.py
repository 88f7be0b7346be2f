"""PyTorch side of the icefall transducer benchmark (issue 17): icefall's own
pruned_transducer_stateless3 code (the Conformer transducer of egs/librispeech/ASR) at the recipe's
full size, with seeded random weights, timed on the same work as `hark bench` for the model.

  python3 bench/icefall_peer.py export --icefall-root SRC --shims DIR --out OUT [--small]
          # OUT/pretrained.pt ({"model": state_dict}, as icefall's export.py writes it) and
          # OUT/tokens.txt (500 made-up pieces) for tools/convert_icefall.py --recipe
          # pruned_transducer_stateless3 --checkpoint OUT/pretrained.pt --tokens OUT/tokens.txt
          # --output OUT/model (the same weights in a hark model directory)
  python3 bench/icefall_peer.py time --icefall-root SRC --shims DIR [--ckpt OUT/pretrained.pt]
          --device cuda|cpu [--modes fp32,fp16,bf16,compile,compile-bf16] [--batches 1,64,256]
          [--seconds 10] [--method greedy_search|modified_beam_search] [--beam 4]
          [--min-time 2] [--small]

SRC is an icefall source tree (`icefall/` and `egs/librispeech/ASR/pruned_transducer_stateless3`,
fetched, never committed; `bench/icefall.sh --prepare-ext` extracts the files imported here from
the commit the T1 goldens were made with); DIR holds ../shared/tools/icefall/icefall_shims.py, the
import shims that stand in for k2, lhotse, kaldifeat and the other packages icefall imports but
this code never calls (their k2 ragged bookkeeping is what modified_beam_search runs). Nothing of
icefall is copied here: the model is built by the recipe's own train.get_params() +
train.get_transducer_model(params, enable_giga=False), the searches are its own
beam_search.greedy_search_batch and beam_search.modified_beam_search.

The model: get_params()'s sizes (encoder_dim 512, nhead 8, dim_feedforward 2048, 12 encoder
layers, decoder_dim 512, joiner_dim 512; 80 fbank bins, subsampling 4) and the command-line
defaults of train.py (vocab 500 as lang_bpe_500, context_size 2, cnn_module_kernel 31 from the
Conformer, no causal convolution, no dynamic chunks). --small: encoder_dim 64, 4 heads,
dim_feedforward 128, 2 layers, decoder_dim 64, joiner_dim 64, vocab 500 (a CPU check). The
weights are torch's initialisation under a fixed seed (--seed), perturbed the way
tools/icefall_reference.py does it (every scale, bias and pos_bias moved by a seeded generator;
the joiner's output scaled, its encoder projection scaled and the blank logit raised) with smaller
biases, so that greedy search emits a speech-like number of tokens from random-normal features:
about 45 per 10 s utterance (the "tokens" field of each row: the mean per utterance of the last
run). `export` and `time` without --ckpt generate the same weights.

`time` runs, per batch B: B utterances of random-normal 80-bin features of --seconds, all the same
length ((n + 80) // 160 frames for n samples at 16 kHz: kaldifeat's count with snip_edges False,
icefall's fbank; 1000 frames for 10 s), already on the device -> model.encoder(x, x_lens) ->
greedy_search_batch(model, encoder_out, encoder_out_lens) or modified_beam_search(model,
encoder_out, encoder_out_lens, beam=--beam) -> token lists on the host (both return Python
lists). The model runs as pretrained.py runs it: model.unk_id unset (decode.py sets it, which
makes the searches treat <unk> as blank), its Scaled* modules multiplying their weights by
exp(scale) on every call (hark folds the scales in at conversion). Modes: fp32 (TF32 off); fp16
and bf16, eager under torch.autocast (on a CPU both bf16, which has no fp16 autocast); compile and
compile-bf16, the encoder call compiled by torch.compile(dynamic=False) under autocast fp16 /
bf16. The search runs icefall's code eagerly in every mode (under the mode's autocast): Python
looping over frames (and over utterances and hypotheses in modified_beam_search) around small
kernels, with a device-to-host copy per frame (and per utterance and frame in
modified_beam_search), nothing torch.compile could take whole. One JSON line per (mode, batch):
the median time over a --min-time loop (at least 3 runs) after --warmup runs (2; the first
compiles in the compile modes), the peak GPU memory; an exception (e.g. out of memory at batch
256) prints an "error" row and goes on."""
import argparse, contextlib, itertools, json, math, os, sys, time, types

RECIPE = os.path.join("egs", "librispeech", "ASR", "pruned_transducer_stateless3")

ap = argparse.ArgumentParser()
ap.add_argument("cmd", choices=["export", "time", "golden"])
ap.add_argument("--golden", default=None,
                help="golden: an icefall golden set (T1: model_args.json, pretrained.pt, results.json, goldens/<utt>/fbank.npy)")
ap.add_argument("--icefall-root", default=".ext/icefall")
ap.add_argument("--shims", default=".ext/icefall-shims")
ap.add_argument("--out", default="/tmp/icefall_peer")
ap.add_argument("--ckpt", default=None,
                help="time: weights to load (export's pretrained.pt); without it the same "
                     "generated weights as export")
ap.add_argument("--small", action="store_true", help="a small model (2 layers, d 64)")
ap.add_argument("--seed", type=int, default=7)
ap.add_argument("--blank-shift", type=float, default=None,
                help="added to the blank logit's bias (default 7)")
ap.add_argument("--device", default="cuda")
ap.add_argument("--modes", default="fp32,fp16,bf16,compile,compile-bf16")
ap.add_argument("--batches", default="1,64,256")
ap.add_argument("--seconds", type=float, default=10.0)
ap.add_argument("--method", default="greedy_search",
                choices=["greedy_search", "modified_beam_search"])
ap.add_argument("--beam", type=int, default=4)
ap.add_argument("--min-time", type=float, default=2.0)
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--threads", type=int, default=0)
a = ap.parse_args()

FULL = dict(vocab_size=500, context_size=2)  # the sizes are get_params()'s own
SMALL = dict(encoder_dim=64, nhead=4, dim_feedforward=128, num_encoder_layers=2, decoder_dim=64,
             joiner_dim=64, vocab_size=500, context_size=2)


def use_icefall(root, shims):
    """Makes icefall's recipe importable (the shims installed, the packages icefall imports at
    module level but never calls here stood in for) and returns its (train, beam_search)."""
    root = os.path.abspath(root)
    recipe = os.path.join(root, RECIPE)
    if not os.path.isfile(os.path.join(recipe, "train.py")):
        sys.exit(f"icefall_peer: {recipe}/train.py is not there (--icefall-root is an icefall "
                 f"source tree: bench/icefall.sh --prepare-ext fills .ext/icefall)")
    if not os.path.isfile(os.path.join(shims, "icefall_shims.py")):
        sys.exit(f"icefall_peer: {shims}/icefall_shims.py is not there (--shims: a copy of "
                 f"../shared/tools/icefall; bench/icefall.sh --prepare-ext fills "
                 f".ext/icefall-shims)")
    sys.path.insert(0, os.path.abspath(shims))
    import icefall_shims
    icefall_shims.install()
    try:  # train.py, beam_search.py and icefall/utils.py import it; only BPE-model loading uses it
        import sentencepiece  # noqa: F401
    except ImportError:
        sp = types.ModuleType("sentencepiece")
        sp.SentencePieceProcessor = object
        sys.modules["sentencepiece"] = sp
    try:  # icefall/utils.py: version.parse(torch.__version__) at import, compared in training only
        from packaging import version  # noqa: F401
    except ImportError:
        try:  # torch >= 2.2 carries packaging for itself
            from torch._vendor.packaging import version
        except ImportError:
            version = types.ModuleType("packaging.version")
            version.parse = lambda s: tuple(int(x) for x in
                                            s.split("+")[0].split(".")[:3] if x.isdigit())
        pkg = types.ModuleType("packaging")
        pkg.version = version
        sys.modules["packaging"], sys.modules["packaging.version"] = pkg, version
    try:  # scaling.py imports it for its ScaledLSTM, which the Conformer recipe never builds
        import torch.backends.cudnn.rnn  # noqa: F401
    except ImportError:
        rnn = sys.modules["torch.backends.cudnn.rnn"] = types.ModuleType("torch.backends.cudnn.rnn")
        torch.backends.cudnn.rnn = rnn
    sys.path.insert(0, root)
    sys.path.insert(0, recipe)
    import train
    import beam_search
    import k2
    # The shims' RaggedShape.row_ids builds its arange on the CPU whatever the device of the row
    # splits; k2 keeps row_ids where the shape is (modified_beam_search moves the shape to the
    # model's device and index_selects the encoder frames with it): the same values, there.
    def row_ids(self, axis):
        assert axis == 1
        rs = self.row_splits(1).to(torch.int64)
        sizes = rs[1:] - rs[:-1]
        return torch.repeat_interleave(
            torch.arange(sizes.numel(), dtype=torch.int32, device=rs.device), sizes)
    k2.RaggedShape.row_ids = row_ids
    # get_params() records get_env_info(), which resolves the host's own name (and runs git):
    # a machine without a resolvable name must not stop the benchmark over a log field
    real_env_info = train.get_env_info

    def env_info():
        try:
            return real_env_info()
        except OSError as e:
            return {"env_info": f"unavailable: {e}"}
    train.get_env_info = env_info
    return train, beam_search


import torch  # noqa: E402
train, beam_search = use_icefall(a.icefall_root, a.shims)


def build():
    """The recipe's transducer with the generated weights (export's and time's)."""
    torch.manual_seed(a.seed)
    params = train.get_params()
    params.update(dict(blank_id=0, dynamic_chunk_training=False, short_chunk_size=25,
                       num_left_chunks=4, causal_convolution=False, **FULL))
    if a.small:
        params.update(SMALL)
    model = train.get_transducer_model(params, enable_giga=False)
    # tools/icefall_reference.py's perturbation (every scale, bias and pos_bias moved from a seeded
    # generator, so every stored value matters) and its spread of the joiner's logits (output
    # scaled by 2, encoder projection by 8, blank logit raised), with biases of 0.01 instead of
    # 0.1: at this size, on random features, biases of 0.1 make the encoder's output nearly the
    # same vector at every frame (its time variation 1/8 of its mean), and the searches then emit
    # one or two distinct tokens; with 0.01 and the blank raised by 7 greedy search emits about
    # 45 tokens per 10 s utterance (speech: 40 to 60), a dozen and more distinct ones
    blank_shift = a.blank_shift if a.blank_shift is not None else 7.0
    g = torch.Generator().manual_seed(a.seed + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("_scale") or n.endswith(".scale") or n.endswith(".eps"):
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
            elif n.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.01)
            elif "pos_bias" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        model.joiner.output_linear.weight_scale.add_(math.log(2.0))
        model.joiner.encoder_proj.weight_scale.add_(math.log(8.0))
        model.joiner.output_linear.bias[0] += blank_shift
    cfg = {k: params[k] for k in ("encoder_dim", "nhead", "dim_feedforward", "num_encoder_layers",
                                  "decoder_dim", "joiner_dim", "vocab_size", "context_size")}
    cfg["blank_shift"] = blank_shift
    return model.eval(), cfg


def token_pieces(n):
    """n unique made-up BPE-like pieces: <blk>, <sos/eos>, <unk>, ▁a, a, ▁b, b, .., ▁aa, aa, .."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = ["<blk>", "<sos/eos>", "<unk>"]
    width = 1
    while len(out) < n:
        for word in itertools.product(letters, repeat=width):
            for lead in ("\u2581", ""):
                out.append(lead + "".join(word))
        width += 1
    return out[:n]


if a.cmd == "golden":
    # icefall's own greedy_search_batch on a golden set's features in each of --modes (fp32; fp16,
    # bf16 under autocast), one utterance at a time, against the set's FP32 tokens: how far the
    # original code itself moves under reduced precision (hark's FP16 figures sit beside these)
    import numpy as np
    g = a.golden
    params = train.get_params()
    params.update(json.load(open(os.path.join(g, "model_args.json")))["params"])
    model = train.get_transducer_model(params, enable_giga=False)
    model.load_state_dict(torch.load(os.path.join(g, "pretrained.pt"), map_location="cpu")["model"])
    model.to(a.device).eval()
    res = json.load(open(os.path.join(g, "results.json")))["utterances"]
    pe0 = model.encoder.encoder_pos.pe.clone()
    for mode in a.modes.split(","):
        model.encoder.encoder_pos.pe = pe0.clone()
        for utt, r in res.items():
            want = r["greedy_search"]["tokens"]
            x = torch.from_numpy(np.load(os.path.join(g, "goldens", utt, "fbank.npy")))[None]
            x = x.to(a.device)
            xl = torch.tensor([x.shape[1]], device=a.device)
            amp = (torch.autocast(a.device.split(":")[0], dtype=torch.bfloat16 if mode == "bf16"
                                  else torch.float16) if mode != "fp32" else None)
            with torch.inference_mode():
                if amp:
                    with amp:
                        enc, el = model.encoder(x, xl)
                        hyp = beam_search.greedy_search_batch(model=model, encoder_out=enc,
                                                              encoder_out_lens=el)[0]
                else:
                    enc, el = model.encoder(x, xl)
                    hyp = beam_search.greedy_search_batch(model=model, encoder_out=enc,
                                                          encoder_out_lens=el)[0]
            at = next((i for i, (u, v) in enumerate(zip(hyp, want)) if u != v),
                      min(len(hyp), len(want)))
            print(json.dumps({"mode": mode, "utt": utt, "tokens": len(hyp), "golden": len(want),
                              "same": hyp == want, "first_difference": None if hyp == want
                              else at}), flush=True)
    sys.exit(0)

model, cfg = build()
print(json.dumps({"recipe": "pruned_transducer_stateless3", "icefall": a.icefall_root,
                  "params": sum(p.numel() for p in model.parameters()), **cfg}), file=sys.stderr)

if a.cmd == "export":
    os.makedirs(a.out, exist_ok=True)
    torch.save({"model": model.state_dict()}, os.path.join(a.out, "pretrained.pt"))
    with open(os.path.join(a.out, "tokens.txt"), "w", encoding="utf-8") as f:
        for i, s in enumerate(token_pieces(cfg["vocab_size"])):
            f.write(f"{s} {i}\n")
    print(json.dumps({"exported": a.out, "checkpoint": "pretrained.pt", "tokens": "tokens.txt",
                      "convert": f"python3 tools/convert_icefall.py --recipe "
                                 f"pruned_transducer_stateless3 --checkpoint {a.out}/pretrained.pt "
                                 f"--tokens {a.out}/tokens.txt --output {a.out}/model"}))
    sys.exit(0)

if a.ckpt:
    model.load_state_dict(torch.load(a.ckpt, map_location="cpu")["model"])
dev = a.device
cuda = dev.startswith("cuda")
if a.threads:
    torch.set_num_threads(a.threads)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
model.to(dev)
# RelPositionalEncoding keeps its table as a plain attribute, cast in place to the dtype of the
# last call: each mode starts from the float32 table the model was built with (a bf16 mode
# before fp32 would otherwise leave fp32 a rounded table)
pe_fp32 = model.encoder.encoder_pos.pe.clone()


def encode(x, x_lens):
    return model.encoder(x, x_lens)


def search(enc, enc_lens):
    if a.method == "greedy_search":
        return beam_search.greedy_search_batch(model=model, encoder_out=enc,
                                               encoder_out_lens=enc_lens)
    return beam_search.modified_beam_search(model=model, encoder_out=enc,
                                            encoder_out_lens=enc_lens, beam=a.beam)


n_samples = int(round(a.seconds * 16000))
T = (n_samples + 80) // 160  # kaldifeat / icefall fbank frames, snip_edges False
sync = torch.cuda.synchronize if cuda else (lambda: None)
for mode in [m for m in a.modes.split(",") if m]:
    half = torch.bfloat16 if (mode.endswith("bf16") or not cuda) else torch.float16
    model.encoder.encoder_pos.pe = pe_fp32.clone()
    enc_fn = encode
    if mode.startswith("compile"):
        if not hasattr(torch, "compile"):
            print(json.dumps({"impl": "pytorch", "model": "icefall-conformer", "device": dev,
                              "mode": mode, "method": a.method, "seconds": a.seconds,
                              "error": f"torch {torch.__version__} has no torch.compile"}),
                  flush=True)
            continue
        torch._dynamo.reset()  # each batch compiles anew (dynamic=False): no recompile limit
        for limit in ("recompile_limit", "cache_size_limit"):  # (the name of torch >= 2.6, before)
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 64))
        enc_fn = torch.compile(encode, dynamic=False)
    for B in [int(b) for b in a.batches.split(",") if b]:
        g = torch.Generator().manual_seed(B)
        x = torch.randn(B, T, 80, generator=g).to(dev)
        x_lens = torch.full((B,), T, dtype=torch.int64, device=dev)
        amp = (contextlib.nullcontext() if mode == "fp32" else
               torch.autocast("cuda" if cuda else "cpu", dtype=half))

        def work():
            enc, enc_lens = enc_fn(x, x_lens)
            return search(enc, enc_lens)  # lists of token ids, on the host
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            with torch.inference_mode(), amp:
                for _ in range(max(a.warmup, 1)):
                    hyps = work()
                sync()
                times = []
                t_start = time.perf_counter()
                while True:
                    t0 = time.perf_counter()
                    hyps = work()
                    sync()
                    times.append(time.perf_counter() - t0)
                    if time.perf_counter() - t_start > a.min_time and len(times) >= 3:
                        break
        except Exception as e:  # e.g. out of memory at large batches
            print(json.dumps({"impl": "pytorch", "model": "icefall-conformer", "device": dev,
                              "mode": mode, "method": a.method, "seconds": a.seconds, "batch": B,
                              "error": repr(e)[:300]}), flush=True)
            continue
        times.sort()
        med = times[len(times) // 2]
        r = {"impl": "pytorch", "model": "icefall-conformer", "device": dev, "mode": mode,
             "method": a.method, "seconds": a.seconds, "batch": B, "ms": round(med * 1e3, 3),
             "rtfx": round(B * a.seconds / med, 1), "runs": len(times),
             "peak_mem_mb": round(torch.cuda.max_memory_allocated() / 2**20) if cuda else None,
             "torch": torch.__version__, "frames": T,
             "tokens": round(sum(len(h) for h in hyps) / B, 1)}
        if a.method == "modified_beam_search":
            r["beam"] = a.beam
        if not cuda:
            r["threads"] = torch.get_num_threads()
        print(json.dumps(r), flush=True)
