"""PyTorch side of the Jasper / QuartzNet benchmark: NVIDIA DeepLearningExamples' own model code
(PyTorch/SpeechRecognition/Jasper and .../QuartzNet: jasper.model.Jasper, quartznet.model.QuartzNet)
built from DLE's own full-width configs (jasper10x5dr_speedp-online_speca.yaml,
quartznet15x5_speedp-online-1.15_speca.yaml) with the weights `hark bench --synthetic` generates.

  python3 bench/jasper_peer.py time --dle DLE_ROOT --model jasper10x5dr|quartznet15x5
          [--modes fp32,fp16,compile] [--batches 1,8,64] [--seconds 2,7,16.7] [--seed 1]
  python3 bench/jasper_peer.py export --dle DLE_ROOT --model jasper10x5dr --out DIR [--seed 1]
          # DIR/checkpoint.pt + DIR/config.yaml for tools/convert_jasper.py (the same weights
          # in a hark model directory: hark bench --model DIR/model)

DLE_ROOT is a checkout of github.com/NVIDIA/DeepLearningExamples (fetched, never committed to
hark): its model code is imported from there as it is, nothing of it is copied here.

The weights: every state-dict tensor of DLE's model (num_batches_tracked left alone) is generated
from its own name and shape exactly as src/model/synth_weights.c does (a 32-bit LCG seeded by
the seed and the name; matrices uniform with scale 1.7 / sqrt(fan_in), running variances in
[0.75, 1.25], other vectors 0.1 · uniform), in float32 with the same roundings, so hark's
`--synthetic` model and this one hold the same numbers (`export` hands them to the converter
for a check through the file path as well).

Times the same work as `hark bench` for Jasper: random 64-mel features of the padded length hark
uses for the audio (roundup(1 + n / 160, 16) + pad_leading frames; 16 leading frames for
Jasper, as DLE's inference.py) -> encoder -> CTC head (log-softmax) -> greedy argmax -> ids
copied to the host; one JSON line per (mode, seconds, batch). Modes: fp32; fp16 (eager under
torch.autocast, as DLE's inference.py --amp); compile (torch.compile of the same under
autocast fp16); bf16 / compile-bf16 likewise."""
import argparse, contextlib, json, os, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("cmd", choices=["time", "export"])
ap.add_argument("--dle", required=True, help="root of a DeepLearningExamples checkout")
ap.add_argument("--model", default="jasper10x5dr", choices=["jasper10x5dr", "quartznet15x5"])
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--out", default="/tmp/jasper_peer")
ap.add_argument("--device", default="cuda")
ap.add_argument("--modes", default="fp32,fp16,compile")
ap.add_argument("--batches", default="1,8,64")
ap.add_argument("--seconds", default="2,7,16.7")
ap.add_argument("--min-time", type=float, default=2.0)
a = ap.parse_args()

import numpy as np
import torch
import yaml

ARCH = "jasper" if a.model.startswith("jasper") else "quartznet"
SUB = {"jasper": "Jasper", "quartznet": "QuartzNet"}[ARCH]
YAML = {"jasper": "jasper10x5dr_speedp-online_speca.yaml",
        "quartznet": "quartznet15x5_speedp-online-1.15_speca.yaml"}[ARCH]
PAD_LEADING = 16 if ARCH == "jasper" else 0
root = os.path.join(a.dle, "PyTorch", "SpeechRecognition", SUB)
if not os.path.isdir(root):
    sys.exit(f"jasper_peer: {root} is not there (--dle is the root of a DeepLearningExamples "
             f"checkout)")
sys.path.insert(0, root)
if ARCH == "jasper":
    from jasper.model import Jasper as Model
else:
    from quartznet.model import QuartzNet as Model


def load_config():
    path = os.path.join(root, "configs", YAML)
    cfg = yaml.safe_load(open(path))
    cfg = yaml.safe_load(yaml.dump(cfg, Dumper=type("NoAlias", (yaml.Dumper,), {
        "ignore_aliases": lambda self, data: True})))  # copies where the yaml has anchors
    return path, cfg


# ---- synth_weights.c's generator, vectorised -------------------------------------------------
M32 = np.uint64(0xFFFFFFFF)
LCG_A, LCG_C = np.uint64(1664525), np.uint64(1013904223)
_steps = [np.zeros(0, np.uint64), np.zeros(0, np.uint64)]  # x_i = A_i x_0 + C_i, i = 1..n


def lcg_steps(n):
    A, C = _steps
    if len(A) >= n:
        return A[:n], C[:n]
    A, C = np.array([LCG_A], np.uint64), np.array([LCG_C], np.uint64)
    while len(A) < n:  # steps m + j = step j after step m
        Am, Cm = A[-1], C[-1]
        A2 = (A * Am) & M32
        C2 = (A * Cm + C) & M32
        A, C = np.concatenate([A, A2]), np.concatenate([C, C2])
    _steps[:] = [A, C]
    return A[:n], C[:n]


def synth(name, shape, seed):
    s = seed & 0xFFFFFFFF
    for ch in name.encode():
        s = (s * 31 + ch) & 0xFFFFFFFF
    n = int(np.prod(shape)) if shape else 1
    A, C = lcg_steps(n)
    x = (A * np.uint64(s) + C) & M32
    r = (x >> np.uint64(8)).astype(np.float32) / np.float32(1 << 23) - np.float32(1.0)
    if name.endswith("running_var"):
        v = np.float32(0.75) + np.float32(0.5) * (r + np.float32(1.0)) * np.float32(0.5)
    elif "norm" in name and name.endswith(".weight"):
        v = np.float32(1.0) + np.float32(0.1) * r
    elif len(shape) >= 2:
        fan_in = np.float32(n // shape[0])
        v = r * np.float32(1.7) / np.sqrt(fan_in)
    else:
        v = np.float32(0.1) * r
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def build():
    path, cfg = load_config()
    sec = cfg[ARCH]
    labels = cfg["labels"]
    model = Model(encoder_kw=sec["encoder"],
                  decoder_kw={"n_classes": len(labels) + 1, **sec["decoder"]})
    sd = model.state_dict()
    with torch.no_grad():
        for k, v in sd.items():
            if k.endswith("num_batches_tracked"):
                continue
            v.copy_(synth(k, tuple(v.shape), a.seed))
    return model.eval(), path, labels


model, cfg_path, labels = build()
print(json.dumps({"model": a.model, "dle_config": cfg_path, "seed": a.seed,
                  "params": sum(p.numel() for p in model.parameters())}), file=sys.stderr)

if a.cmd == "export":
    os.makedirs(a.out, exist_ok=True)
    torch.save({"state_dict": model.state_dict()}, os.path.join(a.out, "checkpoint.pt"))
    with open(cfg_path) as f, open(os.path.join(a.out, "config.yaml"), "w") as g:
        g.write(f.read())
    print(json.dumps({"exported": a.out, "checkpoint": "checkpoint.pt", "config": "config.yaml",
                      "convert": f"python3 tools/convert_jasper.py --checkpoint "
                                 f"{a.out}/checkpoint.pt --config {a.out}/config.yaml "
                                 f"--output {a.out}/model"}))
    sys.exit(0)

dev = a.device
model = model.to(dev)


def run(feats, lens):
    logp, _ = model(feats, lens)
    return logp.argmax(dim=-1).int()


for mode in a.modes.split(","):
    f = torch.compile(run, dynamic=False) if mode.startswith("compile") else run
    half = torch.bfloat16 if mode.endswith("bf16") else torch.float16
    for secs in [float(s) for s in a.seconds.split(",")]:
        n = int(secs * 16000)
        frames = 1 + n // 160
        t_in = -(-frames // 16) * 16 + PAD_LEADING
        for B in [int(b) for b in a.batches.split(",")]:
            g = torch.Generator().manual_seed(B)
            feats = torch.randn(B, 64, t_in, generator=g).to(dev)
            feats[:, :, :PAD_LEADING] = 0
            lens = torch.full((B,), frames + PAD_LEADING, dtype=torch.int32, device=dev)
            amp = (contextlib.nullcontext() if mode == "fp32" else
                   torch.autocast("cuda" if dev.startswith("cuda") else "cpu", dtype=half))
            sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
            if dev.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats()
            try:
                with torch.inference_mode(), amp:
                    for _ in range(3):
                        f(feats, lens).cpu()
                    sync()
                    times = []
                    t_start = time.perf_counter()
                    while True:
                        t0 = time.perf_counter()
                        f(feats, lens).cpu()  # the ids to the host, as hark's bench
                        sync()
                        times.append(time.perf_counter() - t0)
                        if time.perf_counter() - t_start > a.min_time and len(times) >= 3:
                            break
            except Exception as e:  # e.g. out of memory at large batches
                print(json.dumps({"impl": "pytorch", "model": a.model, "mode": mode,
                                  "seconds": secs, "batch": B, "error": repr(e)[:200]}),
                      flush=True)
                continue
            times.sort()
            med = times[len(times) // 2]
            r = {"impl": "pytorch", "model": a.model, "device": dev, "mode": mode,
                 "seconds": secs, "batch": B, "ms": round(med * 1e3, 3),
                 "rtfx": round(B * secs / med, 1), "runs": len(times),
                 "peak_mem_mb": round(torch.cuda.max_memory_allocated() / 2**20)
                 if dev.startswith("cuda") else None,
                 "torch": torch.__version__}
            print(json.dumps(r), flush=True)
