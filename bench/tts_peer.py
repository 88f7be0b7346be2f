#!/usr/bin/env python3
"""bench/tts_peer.py — the PyTorch side of bench/tts.sh: DeepLearningExamples' FastSpeech
(CUDA-Optimized/FastSpeech, its own model code) + jik876/hifi-gan's Generator (its own models.py),
imported from their trees as they are (fetched, never committed to hark; nothing of them is
copied here).

  python3 bench/tts_peer.py export --dle DLE_FASTSPEECH --hifigan HIFIGAN --out DIR [--seed 1]
  python3 bench/tts_peer.py time --dle DLE_FASTSPEECH --hifigan HIFIGAN --out DIR --ids IDS.json
                                 [--batches 1,32] [--modes fp16,compile] [--min-time 1]

DLE_FASTSPEECH is the CUDA-Optimized/FastSpeech folder of NVIDIA/DeepLearningExamples, HIFIGAN a
checkout of jik876/hifi-gan.

export: builds both at full size — FastSpeech from DLE's hparams/base.yaml (d_model 384, 6 + 6
FFT blocks), HiFi-GAN from config_v1.json — with PyTorch's default initialisation under the seed
(HiFi-GAN's own init_weights included), the duration predictor's last linear set to weight 0,
bias log 6 (DLE's exp(x) - 1 then gives 5 frames per symbol, so the mel side has a realistic
length whatever the random encoder says), and saves them the way the toolkits' train.py do:
DIR/fastspeech.pt ({'step', 'model': the DataParallel state dict, keys 'module.*'}) and DIR/g_v1
({'generator': state dict with weight_g / weight_v}). bench/tts.sh converts these with hark's
own converters, so both sides run the same weights.

time: each batch holds the sentences of IDS.json (hark's symbol ids of DLE's golden sentences,
`hark speak --dump-dir`; hark's ids equal DLE's text_to_sequence, tests/text) in turn, padded as
DLE's inferencer pads them (ids 0, positions 1..n then 0). One run = ids on the device ->
FastSpeech (DLE's forward, its length regulator included) -> mel (B, T, 80) -> HiFi-GAN on the
padded mel batch after remove_weight_norm (as hifi-gan's inference.py) -> audio on the host.
Modes: fp32; fp16 (model.half() and use_fp16=True, as DLE's inferencer runs FP16; the vocoder
halved too); compile (torch.compile of both halved models). Prints one JSON line per (mode,
batch): ms per batch (median), audio seconds, RTFx, peak GPU memory.
"""
import argparse, json, math, os, statistics, sys, time, types

import torch


def import_trees(dle, hifigan):
    sys.path.insert(0, dle)
    sys.path.insert(0, hifigan)
    # hifi-gan's utils.py imports matplotlib for its training plots; the generator never calls
    # it. Stand-ins for what that import touches:
    if "matplotlib" not in sys.modules:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            mpl = types.ModuleType("matplotlib")
            mpl.use = lambda *a, **k: None
            sys.modules["matplotlib"] = mpl
            sys.modules["matplotlib.pylab"] = types.ModuleType("matplotlib.pylab")
            mpl.pylab = sys.modules["matplotlib.pylab"]
    # DLE's model imports its text package for the symbol count, whose cleaners import unidecode
    # and inflect at load; the ids come from IDS.json, so stand-ins do where they are absent.
    for name in ("unidecode", "inflect"):
        try:
            __import__(name)
        except ImportError:
            m = types.ModuleType(name)
            m.unidecode = lambda s: s
            m.engine = lambda: None
            sys.modules[name] = m
    import yaml
    from fastspeech.model.fastspeech import Fastspeech
    from models import Generator
    return yaml, Fastspeech, Generator


class AttrDict(dict):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.__dict__ = self


MODEL_KEYS = ("max_seq_len", "d_model", "phoneme_side_n_layer", "phoneme_side_head",
              "phoneme_side_conv1d_filter_size", "phoneme_side_output_size", "mel_side_n_layer",
              "mel_side_head", "mel_side_conv1d_filter_size", "mel_side_output_size",
              "fft_conv1d_kernel", "fft_conv1d_padding", "duration_predictor_filter_size",
              "duration_predictor_kernel_size", "dropout", "num_mels", "fused_layernorm")


def build(a):
    yaml, Fastspeech, Generator = import_trees(a.dle, a.hifigan)
    hp = yaml.safe_load(open(os.path.join(a.dle, "fastspeech/hparams/base.yaml")))
    kw = {k: hp[k] for k in MODEL_KEYS}
    kw["n_mels"] = kw.pop("num_mels")
    h = AttrDict(json.load(open(a.vocoder_config or os.path.join(a.hifigan, "config_v1.json"))))
    return Fastspeech, Generator, kw, h


def export(a):
    Fastspeech, Generator, kw, h = build(a)
    torch.manual_seed(a.seed)
    fs = Fastspeech(**kw).eval()
    lin = fs.length_regulator.duration_predictor.linear_layer
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.fill_(math.log(6.0))
    g = Generator(h).eval()
    os.makedirs(a.out, exist_ok=True)
    torch.save({"step": 0, "model": {"module." + k: v for k, v in fs.state_dict().items()}},
               os.path.join(a.out, "fastspeech.pt"))
    torch.save({"generator": g.state_dict()}, os.path.join(a.out, "g_v1"))
    print(json.dumps({"fastspeech_params": sum(p.numel() for p in fs.parameters()),
                      "hifigan_params": sum(p.numel() for p in g.parameters())}))


def timed(fn, min_time):
    fn()
    fn()
    times, t_end = [], time.time() + min_time
    while len(times) < 5 or time.time() < t_end:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), len(times)


def time_modes(a):
    Fastspeech, Generator, kw, h = build(a)
    dev = torch.device(a.device)
    ck = torch.load(os.path.join(a.out, "fastspeech.pt"), map_location="cpu")
    gk = torch.load(a.vocoder_ckpt or os.path.join(a.out, "g_v1"), map_location="cpu")
    gk = gk.get("generator", gk)  # a train.py checkpoint, or a bare state dict
    wn = any(k.endswith("weight_g") for k in gk)  # weight norm still in the checkpoint
    ids = json.load(open(a.ids))
    for mode in a.modes.split(","):
        fs = Fastspeech(**kw)
        fs.load_state_dict({k[len("module."):]: v for k, v in ck["model"].items()})
        g = Generator(h)
        if not wn:
            g.remove_weight_norm()
        g.load_state_dict(gk)
        if wn:
            g.remove_weight_norm()
        fs, g = fs.eval().to(dev), g.eval().to(dev)
        half = mode in ("fp16", "compile")
        if half:
            fs, g = fs.half(), g.half()
        if mode == "compile":
            fs, g = torch.compile(fs), torch.compile(g)
        for batch in [int(b) for b in a.batches.split(",")]:
            rows = [ids[i % len(ids)] for i in range(batch)]
            n = max(len(r) for r in rows)
            seq = torch.zeros(batch, n, dtype=torch.long)
            pos = torch.zeros(batch, n, dtype=torch.long)
            for i, r in enumerate(rows):
                seq[i, :len(r)] = torch.tensor(r)
                pos[i, :len(r)] = torch.arange(1, len(r) + 1)
            out = {}

            def run():
                with torch.no_grad():
                    mel, _, _ = fs(seq.to(dev, non_blocking=True), pos.to(dev, non_blocking=True),
                                   use_fp16=half)
                    y = g(mel.transpose(1, 2))
                    out["audio"] = y.float().cpu()

            torch.cuda.reset_peak_memory_stats(dev)
            try:
                ms, runs = timed(run, a.min_time)
            except Exception as ex:  # noqa: BLE001 — report a mode that fails, go on
                print(json.dumps({"impl": "pytorch", "mode": mode, "batch": batch,
                                  "error": str(ex)[:300]}), flush=True)
                continue
            samples = out["audio"].shape[-1]
            audio_s = batch * samples / h.sampling_rate
            print(json.dumps({"impl": "pytorch", "device": a.device, "mode": mode,
                              "batch": batch, "ms": round(ms, 3), "runs": runs,
                              "audio_s": round(audio_s, 3),
                              "rtfx": round(audio_s / (ms / 1000), 1),
                              "peak_mem_mb": round(torch.cuda.max_memory_allocated(dev) / 2**20)}),
                  flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("export", "time"))
    ap.add_argument("--dle", required=True)
    ap.add_argument("--hifigan", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ids")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--modes", default="fp16,compile")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--vocoder-ckpt", default=None,
                    help="time: this generator (jik876's g_XXXXXXXX, or a state dict with weight "
                         "norm removed, e.g. the real V3) instead of OUT/g_v1")
    ap.add_argument("--vocoder-config", default=None,
                    help="its config_vN.json (default: config_v1.json of --hifigan)")
    a = ap.parse_args()
    export(a) if a.mode == "export" else time_modes(a)


if __name__ == "__main__":
    main()
