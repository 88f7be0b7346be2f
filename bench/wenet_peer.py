"""PyTorch side of the Conformer benchmark: WeNet's own ConformerEncoder + CTC (full LibriSpeech
U2++ size: 12 blocks, d=256, 4 heads, FFN 2048, kernel 15, vocab 5002) with seeded random weights.

  python3 bench/wenet_peer.py export --out DIR     # final.pt + train.yaml + units.txt for
                                                   # tools/convert_wenet.py (same weights in hark)
  python3 bench/wenet_peer.py time --ckpt DIR/final.pt --device cuda --modes fp32,fp16,compile
                                   --batches 1,8,64,256 [--threads N]
  python3 bench/wenet_peer.py error --hark-model DIR --golden GOLDEN_DIR --modes fp32,fp16,bf16
  python3 bench/wenet_peer.py chunk --device cuda --modes fp32,fp16 [--seconds 10]

Modes: fp32; fp16 and bf16, eager under torch.autocast; compile and compile-bf16, torch.compile
under autocast fp16 / bf16. `error` runs WeNet's encoder + CTC on a golden set's features
(GOLDEN_DIR/goldens/<utt>/fbank.npy) in each mode and prints, per utterance, the relative RMS
error of the encoder output and of the CTC log-probs against the set's FP32 outputs
(enc_full.npy, ctc_logprobs_full.npy) and the frames whose greedy argmax differs: the error
PyTorch's own reduced precision makes, next to hark's (tests/model/wenet/test_conformer_gpu.c prints
the same figures).

`chunk` times WeNet's streaming step as its runtime runs it: BaseEncoder.forward_chunk, one
stream at a time (WeNet asserts a batch of 1), 16-frame (640 ms) chunks with every earlier chunk
as left context, plus the CTC log-softmax of each chunk, over a --seconds stream; it prints the
average time per chunk and the streams one GPU keeps in real time that way (640 ms / that time).

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


def build():
    torch.manual_seed(20261121)
    enc = ConformerEncoder(80, **ENC)
    ctc = CTC(V, 256)
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


def chunk_step():
    enc, ctc = build()
    enc, ctc = enc.to(a.device), ctc.to(a.device)
    T = int(a.seconds * 100) - 2
    chunk, sub, ctx = 16, enc.embed.subsampling_rate, enc.embed.right_context + 1
    stride, window = sub * chunk, (chunk - 1) * sub + ctx
    for mode in [m for m in a.modes.split(",") if not m.startswith("compile")]:
        half = torch.bfloat16 if (mode == "bf16" or a.device != "cuda") else torch.float16
        amp = torch.autocast(a.device, dtype=half, enabled=mode != "fp32")
        sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
        g = torch.Generator().manual_seed(7)
        xs = torch.randn(1, T, 80, generator=g).to(a.device)

        def stream():  # WeNet's forward_chunk_by_chunk loop, with the CTC head per chunk
            att = torch.zeros((0, 0, 0, 0), device=a.device)
            cnn = torch.zeros((0, 0, 0, 0), device=a.device)
            off, n = 0, 0
            for cur in range(0, T - ctx + 1, stride):
                y, att, cnn = enc.forward_chunk(xs[:, cur:min(cur + window, T)], off, -1, att, cnn)
                ctc.log_softmax(y)
                off += y.size(1)
                n += 1
            return n
        with torch.inference_mode(), amp:
            stream()
            sync()
            runs, t0 = 0, time.perf_counter()
            while True:
                n = stream()
                sync()
                runs += 1
                if time.perf_counter() - t0 > a.min_time and runs >= 2:
                    break
            ms = (time.perf_counter() - t0) / (runs * n) * 1e3
        print(json.dumps({"impl": "wenet forward_chunk", "device": a.device, "mode": mode,
                          "chunk_ms_audio": 640, "chunks_per_stream": n,
                          "ms_per_chunk": round(ms, 3),
                          "streams_real_time_one_at_a_time": int(640 / ms)}), flush=True)


if a.cmd == "chunk":
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
