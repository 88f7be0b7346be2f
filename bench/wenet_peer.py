"""PyTorch side of the Conformer benchmark: WeNet's own ConformerEncoder + CTC (full LibriSpeech
U2++ size: 12 blocks, d=256, 4 heads, FFN 2048, kernel 15, vocab 5002) with seeded random weights.

  python3 bench/wenet_peer.py export --out DIR     # final.pt + train.yaml + units.txt for
                                                   # tools/convert_wenet.py (same weights in hark)
  python3 bench/wenet_peer.py time --ckpt DIR/final.pt --device cuda --modes fp32,fp16,compile
                                   --batches 1,8,64,256 [--threads N]
  python3 bench/wenet_peer.py error --hark-model DIR --golden GOLDEN_DIR --modes fp32,fp16,bf16
  python3 bench/wenet_peer.py chunk --device cuda --modes fp32,fp16 [--seconds 10]
                                    [--batched 1,64,512] [--left-chunks N]
  /usr/bin/python3 bench/wenet_peer.py chunk --check --small --device cpu --seconds 2.5

Modes: fp32; fp16 and bf16, eager under torch.autocast; compile and compile-bf16, torch.compile
under autocast fp16 / bf16. `error` runs WeNet's encoder + CTC on a golden set's features
(GOLDEN_DIR/goldens/<utt>/fbank.npy) in each mode and prints, per utterance, the relative RMS
error of the encoder output and of the CTC log-probs against the set's FP32 outputs
(enc_full.npy, ctc_logprobs_full.npy) and the frames whose greedy argmax differs: the error
PyTorch's own reduced precision makes, next to hark's (tests/model/wenet/test_conformer_gpu.c prints
the same figures).

`chunk` times WeNet's streaming step as its runtime runs it: BaseEncoder.forward_chunk, one
stream at a time (WeNet asserts a batch of 1), 16-frame (640 ms) chunks with every earlier chunk
as left context (--left-chunks N keeps N chunks, WeNet's num_decoding_left_chunks), plus the CTC
log-softmax of each chunk, over a --seconds stream; it prints the average time per chunk and the
streams one GPU keeps in real time that way (640 ms / that time), and the caches' size per
stream at the stream's end. It runs the encoder the other commands build (generated weights, or
those of --ckpt / --hark-model).

--batched B1,B2,... adds WeNet's step batched: B streams stepped together through WeNet's own
modules (global_cmvn, embed, each encoder layer's forward with its attention and convolution
caches, after_norm, the CTC head), the per-layer caches stacked along the batch dimension
(attention (layers, B, heads, cache frames, 2 * d_k), convolution (layers, B, d, kernel - 1)).
forward_chunk itself takes one stream: its assert, its batch-1 mask, and its attention cache
whose first dimension is the layers with the batch of 1 folded in (att_cache[i:i + 1]) are the
only batch-1 parts, and forward_chunk_batched below redoes them for B; the attention, the
convolution and the feed-forward are WeNet's module calls unchanged. The simple batched case
only: the B streams started together, so every stream is at the same offset with the same cache
length and no mask is needed (streams that start at different times would need per-stream
offsets and a key mask, which WeNet's runtime never builds). One JSON line per (mode, batch):
ms per batched step (the average over the stream's chunks), ms per chunk per stream, the streams
one GPU keeps in real time (B * 640 ms / ms per step), the caches' size per stream at the end of
the stream and the peak GPU memory. `--check` instead steps 3 streams of different features
batched and compares every chunk's encoder output and CTC log-probs, and the final caches,
against each stream run alone through WeNet's forward_chunk (all left context, and 2 left
chunks), prints the largest absolute differences and exits 1 when one is over 2e-5. `--small`
builds a small encoder (3 blocks, d=64, 4 heads, FFN 128, kernel 15, 101 units) instead of the
full-size one, for the check on a CPU (tests/tools/test_tools.c runs it when .ext holds WeNet).

Times encoder + CTC log-softmax + argmax from 10 s of 80-bin features (998 frames), like
../shared/tools/pytorch-peer/bench_wenet_pytorch.py, and prints one JSON line per (mode, batch).
WeNet's sources are not in hark: --wenet points at a folder holding the `wenet` package (fetched,
never committed) and --shims at stand-ins for packages WeNet imports but never calls here."""
import argparse, json, os, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("cmd", choices=["export", "time", "error", "chunk"])
ap.add_argument("--golden", default=None)
ap.add_argument("--decoder", action="store_true",
                help="export: add U2++'s bitransformer attention decoder (3 + 3 blocks, 4 heads, "
                     "FFN 2048) with random weights, for timing attention rescoring")
ap.add_argument("--wenet", default=".ext")
ap.add_argument("--shims", default=".ext/shims")
ap.add_argument("--out", default="/tmp/wenet_peer")
ap.add_argument("--ckpt", default=None)
ap.add_argument("--hark-model", default=None,
                help="time WeNet's encoder with the weights of a hark model directory (its "
                     "model.safetensors keeps WeNet's state-dict names)")
ap.add_argument("--device", default="cuda")
ap.add_argument("--modes", default="fp32,fp16,compile")
ap.add_argument("--batches", default="1,8,64,256")
ap.add_argument("--threads", type=int, default=0)
ap.add_argument("--seconds", type=float, default=10.0)
ap.add_argument("--min-time", type=float, default=2.0)
ap.add_argument("--batched", default="",
                help="chunk: also time WeNet's step batched, B streams together, for each B")
ap.add_argument("--left-chunks", type=int, default=-1,
                help="chunk: WeNet's num_decoding_left_chunks (-1: all earlier chunks)")
ap.add_argument("--check", action="store_true",
                help="chunk: compare the batched step with forward_chunk one stream at a time")
ap.add_argument("--small", action="store_true",
                help="a small generated encoder (3 blocks, d=64) instead of the full-size one")
a = ap.parse_args()
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from wenet_import import use_wenet  # noqa: E402
use_wenet(a.wenet, a.shims)
import torch  # noqa: E402
try:
    from wenet.models.transformer.encoder import ConformerEncoder
    from wenet.models.transformer.ctc import CTC
except ImportError:
    from wenet.transformer.encoder import ConformerEncoder
    from wenet.transformer.ctc import CTC

ENC = dict(output_size=256, attention_heads=4, linear_units=2048, num_blocks=12, dropout_rate=0.1,
           positional_dropout_rate=0.1, attention_dropout_rate=0.1, input_layer="conv2d",
           normalize_before=True, cnn_module_kernel=15, use_cnn_module=True, activation_type="swish",
           pos_enc_layer_type="rel_pos", selfattention_layer_type="rel_selfattn", causal=True,
           use_dynamic_chunk=True, cnn_module_norm="layer_norm", use_dynamic_left_chunk=False)
V = 5002
if a.small:  # --small: for the batched step's check on a CPU
    ENC = dict(ENC, output_size=64, attention_heads=4, linear_units=128, num_blocks=3)
    V = 101


def build():
    torch.manual_seed(20261121)
    enc = ConformerEncoder(80, **ENC)
    ctc = CTC(V, ENC["output_size"])
    with torch.no_grad():  # non-degenerate random weights, not zeros
        for m in list(enc.modules()) + list(ctc.modules()):
            for name, p in m.named_parameters(recurse=False):
                if name == "weight" and p.dim() > 1:
                    fan_in = p[0].numel()
                    p.normal_(0, min(max(fan_in ** -0.5, 0.02), 0.1))
                elif "pos_bias" in name:
                    p.normal_(0, 0.1)
    return enc.eval(), ctc.eval()


DEC = dict(attention_heads=4, linear_units=2048, num_blocks=3, r_num_blocks=3, dropout_rate=0.1,
           positional_dropout_rate=0.1, self_attention_dropout_rate=0.1,
           src_attention_dropout_rate=0.1)


def build_decoder():
    try:
        from wenet.models.transformer.decoder import BiTransformerDecoder
    except ImportError:
        from wenet.transformer.decoder import BiTransformerDecoder
    torch.manual_seed(20261124)
    dec = BiTransformerDecoder(V, 256, **DEC)
    with torch.no_grad():
        for name, p in dec.named_parameters():
            if p.dim() > 1:
                p.normal_(0, min(max(p[0].numel() ** -0.5, 0.02), 0.1))
    return dec.eval()


if a.cmd == "export":
    import yaml
    enc, ctc = build()
    os.makedirs(a.out, exist_ok=True)
    sd = {f"encoder.{k}": v for k, v in enc.state_dict().items()}
    sd.update({f"ctc.{k}": v for k, v in ctc.state_dict().items()})
    if a.decoder:
        sd.update({f"decoder.{k}": v for k, v in build_decoder().state_dict().items()})
    torch.save(sd, os.path.join(a.out, "final.pt"))
    y = {"input_dim": 80, "output_dim": V, "encoder": "conformer", "encoder_conf": ENC,
         "decoder": "bitransformer" if a.decoder else None,
         **({"decoder_conf": DEC} if a.decoder else {}), "ctc": "ctc", "model": "asr_model",
         "model_conf": {"ctc_weight": 0.3 if a.decoder else 1.0,
                        "reverse_weight": 0.3 if a.decoder else 0.0},
         "dataset_conf": {"feats_type": "fbank",
                          "fbank_conf": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25}}}
    with open(os.path.join(a.out, "train.yaml"), "w") as f:
        yaml.safe_dump(y, f)
    with open(os.path.join(a.out, "units.txt"), "w") as f:
        for i in range(V):
            tok = "<blank>" if i == 0 else "<unk>" if i == 1 else "<sos/eos>" if i == V - 1 else f"\u2581t{i}"
            f.write(f"{tok} {i}\n")
    print(json.dumps({"exported": a.out, "encoder_params": sum(p.numel() for p in enc.parameters())}))
    sys.exit(0)

dev = a.device
if a.threads:
    torch.set_num_threads(a.threads)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
def load_hark_model(d):
    """(ConformerEncoder, CTC) with the config and weights of hark model directory d."""
    import numpy as np
    cfg = json.load(open(os.path.join(d, "1", "model.json")))
    raw = open(os.path.join(d, "1", "model.safetensors"), "rb").read()
    n = int.from_bytes(raw[:8], "little")
    hdr = json.loads(raw[8:8 + n])
    sd = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        assert v["dtype"] == "F32", k
        sd[k] = torch.from_numpy(np.frombuffer(raw[8 + n + b:8 + n + e], dtype=np.float32).copy()
                                 .reshape(v["shape"]))
    e = cfg["encoder"]
    kw = dict(output_size=e["d_model"], attention_heads=e["n_heads"], linear_units=e["ffn_dim"],
              num_blocks=e["n_blocks"], input_layer=e["input_layer"],
              normalize_before=e["normalize_before"], cnn_module_kernel=e["cnn_module_kernel"],
              use_cnn_module=e["use_cnn_module"], macaron_style=e["macaron_style"],
              activation_type=e["activation"], pos_enc_layer_type=e["pos_enc"],
              selfattention_layer_type="rel_selfattn" if e["pos_enc"] == "rel_pos" else "selfattn",
              causal=e["causal"], use_dynamic_chunk=e["use_dynamic_chunk"],
              static_chunk_size=e["static_chunk_size"], cnn_module_norm=e["cnn_module_norm"])
    gcmvn = None
    if "encoder.global_cmvn.mean" in sd:
        try:
            from wenet.models.transformer.cmvn import GlobalCMVN
        except ImportError:
            from wenet.transformer.cmvn import GlobalCMVN
        gcmvn = GlobalCMVN(sd["encoder.global_cmvn.mean"], sd["encoder.global_cmvn.istd"])
    enc = ConformerEncoder(e["input_dim"], global_cmvn=gcmvn, **kw)
    ctc = CTC(cfg["vocab"]["size"], e["d_model"])
    missing, unexpected = enc.load_state_dict(
        {k[8:]: v for k, v in sd.items() if k.startswith("encoder.")}, strict=False)
    assert not unexpected and all(k.endswith(".pe") for k in missing), (missing, unexpected)
    ctc.load_state_dict({k[4:]: v for k, v in sd.items() if k.startswith("ctc.")})
    return enc.eval(), ctc.eval()


enc, ctc = load_hark_model(a.hark_model) if a.hark_model else build()
if a.ckpt:
    sd = torch.load(a.ckpt, map_location="cpu")
    enc.load_state_dict({k[8:]: v for k, v in sd.items() if k.startswith("encoder.")})
    ctc.load_state_dict({k[4:]: v for k, v in sd.items() if k.startswith("ctc.")})
enc.to(dev)
ctc.to(dev)


def precision_error():
    import numpy as np
    gdir = os.path.join(a.golden, "goldens")
    for mode in a.modes.split(","):
        worst_e = worst_c = 0.0
        mis_all = frames = 0
        for u in sorted(os.listdir(gdir)):
            d = os.path.join(gdir, u)
            if not os.path.exists(os.path.join(d, "enc_full.npy")):
                continue
            x = torch.from_numpy(np.load(os.path.join(d, "fbank.npy"))).float().to(dev)
            if x.dim() == 2:
                x = x[None]
            lens = torch.tensor([x.shape[1]], dtype=torch.int32, device=dev)
            half = torch.bfloat16 if mode.endswith("bf16") else torch.float16
            with torch.inference_mode(), torch.autocast(dev, dtype=half, enabled=mode != "fp32"):
                out, _ = enc(x, lens, decoding_chunk_size=-1, num_decoding_left_chunks=-1)
                lp = ctc.log_softmax(out)
            out, lp = out.float().cpu().numpy()[0], lp.float().cpu().numpy()[0]
            re_, rc_ = (np.load(os.path.join(d, f)).reshape(out.shape if i == 0 else lp.shape)
                        for i, f in enumerate(["enc_full.npy", "ctc_logprobs_full.npy"]))
            rel = lambda y, r: float(np.sqrt(((y - r) ** 2).sum() / (r ** 2).sum()))
            ee, ec = rel(out, re_), rel(lp, rc_)
            mis = int((lp.argmax(-1) != rc_.argmax(-1)).sum())
            worst_e, worst_c = max(worst_e, ee), max(worst_c, ec)
            mis_all += mis
            frames += lp.shape[0]
            print(json.dumps({"impl": "pytorch", "mode": mode, "utt": u, "enc_rel": round(ee, 6),
                              "ctc_rel": round(ec, 6), "argmax_mismatches": mis}), flush=True)
        print(json.dumps({"impl": "pytorch", "mode": mode, "worst_enc_rel": round(worst_e, 6),
                          "worst_ctc_rel": round(worst_c, 6), "argmax_mismatches": mis_all,
                          "frames": frames}), flush=True)


if a.cmd == "error":
    precision_error()
    sys.exit(0)


def kv_cache_is_pair():
    """Whether this WeNet's encoder layers take the attention cache as a (key, value) pair (WeNet
    3.1 on) or as one tensor with keys and values side by side in the last dimension (earlier)."""
    import inspect
    layer = type(enc.encoders[0])
    return isinstance(inspect.signature(layer.forward).parameters["att_cache"].default, tuple)


KV_PAIR = kv_cache_is_pair()


def forward_chunk_batched(enc, xs, offset, required_cache_size, att_cache, cnn_cache):
    """BaseEncoder.forward_chunk for B streams at the same offset, stepped together.

    xs (B, window, 80); att_cache (layers, B, heads, cache_t1, 2 * d_k), or (0, 0, 0, 0, 0) for
    the first chunk; cnn_cache (layers, B, d, kernel - 1), or (0, 0, 0, 0). Returns the chunk's
    encoder output (B, chunk, d) and both caches for the next chunk. The same steps as
    forward_chunk in the same order; what differs is only what forward_chunk ties to a batch of
    1: the (B, 1, time) mask handed to embed (which, as there, only passes it through), and each
    layer's attention cache taken as att_cache[i] (B, heads, t, 2 * d_k) rather than
    att_cache[i:i + 1] (the batch of 1 folded into the layer dimension), the new caches stacked
    on a new layer dimension in front of the batch."""
    B = xs.size(0)
    masks = torch.ones(B, 1, xs.size(1), device=xs.device, dtype=torch.bool)
    if enc.global_cmvn is not None:
        xs = enc.global_cmvn(xs)
    xs, _, _ = enc.embed(xs, masks, offset)
    elayers, cache_t1 = att_cache.size(0), att_cache.size(3)
    chunk_size = xs.size(1)
    attention_key_size = cache_t1 + chunk_size
    pos_emb = enc.embed.position_encoding(offset=offset - cache_t1, size=attention_key_size)
    if required_cache_size < 0:
        next_cache_start = 0
    elif required_cache_size == 0:
        next_cache_start = attention_key_size
    else:
        next_cache_start = max(attention_key_size - required_cache_size, 0)
    att_mask = torch.ones((0, 0, 0), dtype=torch.bool)  # forward_chunk's default: no mask
    none = torch.zeros((0, 0, 0, 0), device=xs.device)
    r_att_cache, r_cnn_cache = [], []
    for i, layer in enumerate(enc.encoders):
        if elayers == 0:
            kv_cache = (none, none) if KV_PAIR else none
        else:
            size = att_cache.size(-1) // 2
            kv_cache = ((att_cache[i][..., :size], att_cache[i][..., size:]) if KV_PAIR
                        else att_cache[i])
        xs, _, new_kv_cache, new_cnn_cache = layer(
            xs, att_mask, pos_emb, att_cache=kv_cache,
            cnn_cache=cnn_cache[i] if cnn_cache.size(0) > 0 else cnn_cache)
        new_att_cache = torch.cat(new_kv_cache, dim=-1) if KV_PAIR else new_kv_cache
        r_att_cache.append(new_att_cache[:, :, next_cache_start:, :])  # (B, heads, ?, 2 * d_k)
        r_cnn_cache.append(new_cnn_cache)  # (B, d, kernel - 1)
    if enc.normalize_before and getattr(enc, "final_norm", True):
        xs = enc.after_norm(xs)
    return xs, torch.stack(r_att_cache, dim=0), torch.stack(r_cnn_cache, dim=0)


def chunk_geometry():
    """(frames of a --seconds stream, the chunk's input window, the stride between windows, the
    cache frames WeNet keeps: 16 * --left-chunks, or -1 for all)."""
    T = int(a.seconds * 100) - 2
    chunk, sub, ctx = 16, enc.embed.subsampling_rate, enc.embed.right_context + 1
    req = chunk * a.left_chunks if a.left_chunks >= 0 else -1
    return T, (chunk - 1) * sub + ctx, sub * chunk, ctx, req


def stream_alone(x, req):
    """WeNet's forward_chunk_by_chunk loop over one stream x (1, T, 80), with the CTC head per
    chunk: ([(encoder output, CTC log-probs) per chunk], the last attention cache, cnn cache)."""
    T = x.size(1)
    _, window, stride, ctx, _ = chunk_geometry()
    att = torch.zeros((0, 0, 0, 0), device=x.device)
    cnn = torch.zeros((0, 0, 0, 0), device=x.device)
    off, out = 0, []
    for cur in range(0, T - ctx + 1, stride):
        y, att, cnn = enc.forward_chunk(x[:, cur:min(cur + window, T)], off, req, att, cnn)
        out.append((y, ctc.log_softmax(y)))
        off += y.size(1)
    return out, att, cnn


def stream_batched(xs, req):
    """The same loop for B streams xs (B, T, 80) stepped together by forward_chunk_batched."""
    T = xs.size(1)
    _, window, stride, ctx, _ = chunk_geometry()
    att = torch.zeros((0, 0, 0, 0, 0), device=xs.device)
    cnn = torch.zeros((0, 0, 0, 0), device=xs.device)
    off, out = 0, []
    for cur in range(0, T - ctx + 1, stride):
        y, att, cnn = forward_chunk_batched(enc, xs[:, cur:min(cur + window, T)], off, req, att,
                                            cnn)
        out.append((y, ctc.log_softmax(y)))
        off += y.size(1)
    return out, att, cnn


def cache_bytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def chunk_check():
    """3 streams of different features stepped batched against each alone through WeNet."""
    B, tol = 3, 2e-5
    T = chunk_geometry()[0]
    g = torch.Generator().manual_seed(11)
    # different audio per stream: its own noise, level and offset
    xs = torch.randn(B, T, 80, generator=g) * torch.tensor([1.0, 2.0, 0.5]).view(B, 1, 1)
    xs = (xs + torch.tensor([0.0, -3.0, 4.0]).view(B, 1, 1)).to(a.device)
    worst = 0.0
    for left in (-1, 2):
        req = 16 * left if left >= 0 else -1
        with torch.inference_mode():
            got, att, cnn = stream_batched(xs, req)
            d_enc = d_ctc = d_att = d_cnn = 0.0
            for b in range(B):
                ref, ratt, rcnn = stream_alone(xs[b:b + 1], req)
                assert len(ref) == len(got), (len(ref), len(got))
                for (ye, yl), (re_, rl) in zip(got, ref):
                    assert ye[b:b + 1].shape == re_.shape, (ye.shape, re_.shape)
                    d_enc = max(d_enc, float((ye[b:b + 1] - re_).abs().max()))
                    d_ctc = max(d_ctc, float((yl[b:b + 1] - rl).abs().max()))
                # forward_chunk's caches: (layers, heads, t, 2 * d_k) and (layers, 1, d, k - 1)
                assert att[:, b].shape == ratt.shape and cnn[:, b:b + 1].shape == rcnn.shape
                d_att = max(d_att, float((att[:, b] - ratt).abs().max()))
                d_cnn = max(d_cnn, float((cnn[:, b:b + 1] - rcnn).abs().max()))
        worst = max(worst, d_enc, d_ctc, d_att, d_cnn)
        print(json.dumps({"check": "wenet forward_chunk batched vs one at a time",
                          "device": a.device, "streams": B, "chunks": len(got),
                          "last_chunk_frames": got[-1][0].size(1), "left_chunks": left,
                          "cache_frames": att.size(3), "max_abs_diff_enc": d_enc,
                          "max_abs_diff_ctc_logprobs": d_ctc, "max_abs_diff_att_cache": d_att,
                          "max_abs_diff_cnn_cache": d_cnn}), flush=True)
    if worst > tol:
        print(f"FAIL: largest difference {worst:.3g} > {tol}", flush=True)
        sys.exit(1)
    print(f"ok: largest difference {worst:.3g} <= {tol}", flush=True)


def timed(stream, sync):
    """Runs stream() once to warm up, then again until --min-time (and at least twice): (the
    seconds per call, stream()'s last result)."""
    stream()
    sync()
    runs, t0 = 0, time.perf_counter()
    while True:
        r = stream()
        sync()
        runs += 1
        if time.perf_counter() - t0 > a.min_time and runs >= 2:
            return (time.perf_counter() - t0) / runs, r


def chunk_step():
    T, _, _, _, req = chunk_geometry()
    cuda = a.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for mode in [m for m in a.modes.split(",") if not m.startswith("compile")]:
        half = torch.bfloat16 if (mode == "bf16" or not cuda) else torch.float16
        amp = torch.autocast("cuda" if cuda else "cpu", dtype=half, enabled=mode != "fp32")
        g = torch.Generator().manual_seed(7)
        xs = torch.randn(1, T, 80, generator=g).to(a.device)

        def stream():
            out, att, cnn = stream_alone(xs, req)
            return len(out), cache_bytes(att, cnn)
        with torch.inference_mode(), amp:
            s, (n, cbytes) = timed(stream, sync)
        ms = s / n * 1e3
        print(json.dumps({"impl": "wenet forward_chunk", "device": a.device, "mode": mode,
                          "chunk_ms_audio": 640, "left_chunks": a.left_chunks,
                          "chunks_per_stream": n, "ms_per_chunk": round(ms, 3),
                          "streams_real_time_one_at_a_time": int(640 / ms),
                          "cache_kib_per_stream": round(cbytes / 1024, 1)}), flush=True)
        for B in [int(b) for b in a.batched.split(",") if b]:
            xb = torch.randn(B, T, 80, generator=g).to(a.device)

            def stream_b(xb=xb):
                out, att, cnn = stream_batched(xb, req)
                return len(out), cache_bytes(att, cnn)
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            try:
                with torch.inference_mode(), amp:
                    s, (n, cbytes) = timed(stream_b, sync)
            except RuntimeError as e:  # out of memory at large batches
                print(json.dumps({"impl": "wenet forward_chunk batched", "device": a.device,
                                  "mode": mode, "batch": B, "error": repr(e)[:200]}), flush=True)
                continue
            ms = s / n * 1e3
            print(json.dumps({"impl": "wenet forward_chunk batched", "device": a.device,
                              "mode": mode, "batch": B, "chunk_ms_audio": 640,
                              "left_chunks": a.left_chunks, "chunks_per_stream": n,
                              "ms_per_step": round(ms, 3),
                              "ms_per_chunk_per_stream": round(ms / B, 4),
                              "streams_real_time": int(B * 640 / ms),
                              "cache_kib_per_stream": round(cbytes / B / 1024, 1),
                              "peak_mem_mb": round(torch.cuda.max_memory_allocated() / 2**20)
                              if cuda else None}), flush=True)


if a.cmd == "chunk":
    if a.check:
        chunk_check()
    else:
        chunk_step()
    sys.exit(0)


def run(feats, lens):
    out, mask = enc(feats, lens, decoding_chunk_size=-1, num_decoding_left_chunks=-1)
    return ctc.log_softmax(out).argmax(-1)


T = int(a.seconds * 100) - 2
for mode in a.modes.split(","):
    # modes: fp32, fp16 / bf16 (eager autocast), compile / compile-bf16 (torch.compile + autocast)
    f = torch.compile(run, dynamic=False) if mode.startswith("compile") else run
    half = torch.bfloat16 if (mode.endswith("bf16") or dev != "cuda") else torch.float16
    for B in [int(b) for b in a.batches.split(",")]:
        g = torch.Generator().manual_seed(B)
        feats = torch.randn(B, T, 80, generator=g).to(dev)
        lens = torch.full((B,), T, dtype=torch.int32, device=dev)
        amp = torch.autocast(dev, dtype=half, enabled=mode != "fp32")
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        try:
            with torch.inference_mode(), amp:
                for _ in range(3):
                    f(feats, lens)
                sync()
                times = []
                t_start = time.perf_counter()
                while True:
                    t0 = time.perf_counter()
                    f(feats, lens)
                    sync()
                    times.append(time.perf_counter() - t0)
                    if time.perf_counter() - t_start > a.min_time and len(times) >= 3:
                        break
        except Exception as e:  # e.g. out of memory at large batches
            print(json.dumps({"impl": "pytorch", "mode": mode, "batch": B, "error": repr(e)[:200]}))
            continue
        times.sort()
        med = times[len(times) // 2]
        r = {"impl": "pytorch", "device": dev, "mode": mode, "batch": B, "ms": round(med * 1e3, 3),
             "rtfx": round(B * a.seconds / med, 1), "runs": len(times),
             "peak_mem_mb": round(torch.cuda.max_memory_allocated() / 2**20) if dev == "cuda" else None,
             "threads": torch.get_num_threads()}
        print(json.dumps(r), flush=True)
