#!/usr/bin/env python3
"""bench/tacotron2_peer.py — the PyTorch side of bench/tacotron2.sh: NVIDIA DeepLearningExamples'
Tacotron 2 + WaveGlow (+ its denoiser), PyTorch/SpeechSynthesis/Tacotron2 imported from its tree
as it is (fetched into .ext, never committed to hark; nothing of it is copied here).

  python3 bench/tacotron2_peer.py export --dle DLE_DIR --out DIR [--seed 1] [--steps 600]
  python3 bench/tacotron2_peer.py time --dle DLE_DIR --out DIR --text-file F [--batches 1,8,32]
                                  [--modes fp32,fp16,compile] [--min-time 1] [--device cuda]

DLE_DIR is the PyTorch/SpeechSynthesis/Tacotron2 folder of NVIDIA/DeepLearningExamples.

export: builds both models at full size with DLE's own code — the configurations are what DLE's
model parsers (tacotron2/arg_parser.py, waveglow/arg_parser.py) give by default, through
models.get_model_config / get_model, with --wn-channels 256 (the WaveGlow the DLE benchmarks and
the Triton seed run) and --max-decoder-steps STEPS — under torch.manual_seed(SEED), so every
weight has DLE's / PyTorch's default initialisation (WaveGlow's WN `end` convolutions are zero,
as DLE's constructor makes them). One change: the gate layer's bias is set to -1000, so the stop
token never fires (sigmoid <= 0.5 at every step, whatever the random state) and both sides run
exactly STEPS decoder steps with DLE's early stopping left on (its per-step `sum(not_finished)`
check included, as in real inference); DLE stops at max_decoder_steps, hark's tacotron2 engine at
the model.json's max_decoder_steps, and both then keep all STEPS frames (mel_lengths = STEPS).
STEPS defaults to 600: the seed's own table (DLE trtis_cpp/README.md, the 128-character input)
reports 600 / 601 mels generated per utterance for DLE's trained PyTorch model (579..582 for TRT).
Saved as DLE's train.py save_checkpoint saves them: DIR/checkpoint_Tacotron2_0.pt and
DIR/checkpoint_WaveGlow_0.pt ({'epoch', 'config', 'state_dict'}; WaveGlow with its weight norm,
weight_g / weight_v, as training leaves it). hark's tools/convert_tacotron2.py and
tools/convert_waveglow.py convert them, so both sides run the same weights.

time: the lines of F (without the newline; empty lines skipped) through DLE's own
text_to_sequence(english_cleaners) and pad_sequences (inference.prepare_input_sequence), a batch
filled with the lines in turn. The models are loaded by DLE's inference.load_and_setup_model
(checkpoint load, remove_weightnorm, eval, .half() for FP16), the denoiser is DLE's Denoiser(waveglow)
and one run is test_infer.py's (DLE's benchmark; the seed's PyTorch rows come from it):
prepare_input_sequence -> tacotron2.infer -> waveglow.infer(mel, sigma 0.9, inference.py's
default) -> .float() -> denoiser(strength 0.01) -> audio on the host, each stage timed between
torch.cuda.synchronize as DLE's MeasureTime does. Modes:
  fp32      the FP32 models, eager
  fp16      model.half() — exactly DLE's FP16 inference (inference.py and test_infer.py: --fp16
            halves both models; no autocast), eager
  jit-fp32, jit-fp16   inference.py's own path: torch.jit.script of both (make_ts_scriptable)
  compile   torch.compile of the FP16 models where the graph allows: Tacotron 2's per-step
            decoder.decode and decoder.prenet, its postnet, and WaveGlow's infer (the decoder loop
            itself, with its data-dependent stop, stays DLE's Python loop; the encoder's packed
            LSTM and the denoiser's numpy window stay eager)
  compile-cg  the same with mode="reduce-overhead" (CUDA graphs)
A mode that fails is reported as a JSON line with "error" and the run goes on. One JSON line per
(mode, batch): ms (median per batch, text to audio on the host), the stages' medians,
samples (audio samples per batch), samples_per_s, rtf (synthesis seconds / audio seconds),
peak_mem_mb (torch.cuda.max_memory_allocated).

Shims (import-time only, and only where the module is absent): DLE's inference.py imports
dllogger and matplotlib, its text package inflect (used only for digits: the input has none),
tacotron2_common imports librosa; of librosa the denoiser's STFT calls util.pad_center, util.tiny
and util.normalize(norm=None), so those three get small stand-ins with librosa's documented
meaning (numpy). numpy and scipy must be present (DLE's STFT builds its bases with them).
"""
import argparse, json, os, statistics, sys, time, types, warnings

import torch

GATE_BIAS = -1000.0


def shim_modules():
    def absent(name):
        try:
            __import__(name)
            return False
        except ImportError:
            return True

    if absent("librosa"):
        import numpy as np
        lib = types.ModuleType("librosa")
        util = types.ModuleType("librosa.util")
        filters = types.ModuleType("librosa.filters")

        def pad_center(data, size, axis=-1, **kw):
            n = data.shape[axis]
            if size < n:
                raise ValueError(f"pad_center: target size {size} < input size {n}")
            lpad = (size - n) // 2
            widths = [(0, 0)] * data.ndim
            widths[axis] = (lpad, size - n - lpad)
            return np.pad(data, widths, **kw)

        def tiny(x):
            dt = np.asarray(x).dtype
            if not np.issubdtype(dt, np.floating) and not np.issubdtype(dt, np.complexfloating):
                dt = np.float32
            return np.finfo(dt).tiny

        def normalize(s, norm=None, **kw):
            if norm is not None:
                raise NotImplementedError("librosa stand-in: only normalize(norm=None)")
            return s

        def mel(*a, **k):
            raise NotImplementedError("librosa stand-in: mel filters are not used at inference")

        util.pad_center, util.tiny, util.normalize = pad_center, tiny, normalize
        filters.mel = mel
        lib.util, lib.filters = util, filters
        sys.modules.update({"librosa": lib, "librosa.util": util, "librosa.filters": filters})
    if absent("inflect"):
        m = types.ModuleType("inflect")

        class _Engine:
            def number_to_words(self, *a, **k):
                raise RuntimeError("inflect is absent: the input must hold no digits")

        m.engine = _Engine
        sys.modules["inflect"] = m
    if absent("dllogger"):
        m = types.ModuleType("dllogger")
        m.init = m.log = m.flush = lambda *a, **k: None
        m.StdOutBackend = m.JSONStreamBackend = lambda *a, **k: None
        m.Verbosity = types.SimpleNamespace(DEFAULT=0, VERBOSE=1)
        sys.modules["dllogger"] = m
    if absent("matplotlib"):
        mpl = types.ModuleType("matplotlib")
        mpl.use = lambda *a, **k: None
        plt = types.ModuleType("matplotlib.pyplot")
        mpl.pyplot = plt
        sys.modules.update({"matplotlib": mpl, "matplotlib.pyplot": plt})


def import_dle(dle):
    dle = os.path.abspath(dle)
    if not os.path.isfile(os.path.join(dle, "models.py")):
        sys.exit(f"tacotron2_peer: {dle} is not DLE's PyTorch/SpeechSynthesis/Tacotron2 folder")
    sys.path.insert(0, dle)
    shim_modules()
    # DLE's text package compares with `is not` on literals; Python 3.8+ warns at compile time
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    import models
    import inference
    from waveglow.denoiser import Denoiser
    return types.SimpleNamespace(models=models, inference=inference, Denoiser=Denoiser)


# DLE's command-line flags for the model_config keys (the parsers' own names)
T2_FLAGS = {"n_mel_channels": "--n-mel-channels", "n_symbols": "--n-symbols",
            "symbols_embedding_dim": "--symbols-embedding-dim",
            "encoder_kernel_size": "--encoder-kernel-size",
            "encoder_n_convolutions": "--encoder-n-convolutions",
            "encoder_embedding_dim": "--encoder-embedding-dim",
            "attention_rnn_dim": "--attention-rnn-dim", "attention_dim": "--attention-dim",
            "attention_location_n_filters": "--attention-location-n-filters",
            "attention_location_kernel_size": "--attention-location-kernel-size",
            "n_frames_per_step": "--n-frames-per-step", "decoder_rnn_dim": "--decoder-rnn-dim",
            "prenet_dim": "--prenet-dim", "max_decoder_steps": "--max-decoder-steps",
            "gate_threshold": "--gate-threshold", "p_attention_dropout": "--p-attention-dropout",
            "p_decoder_dropout": "--p-decoder-dropout",
            "postnet_embedding_dim": "--postnet-embedding-dim",
            "postnet_kernel_size": "--postnet-kernel-size",
            "postnet_n_convolutions": "--postnet-n-convolutions"}
WG_FLAGS = {"n_mel_channels": "--n-mel-channels", "n_flows": "--flows", "n_group": "--groups",
            "n_early_every": "--early-every", "n_early_size": "--early-size"}
WN_FLAGS = {"n_layers": "--wn-layers", "kernel_size": "--wn-kernel-size",
            "n_channels": "--wn-channels"}


def config_args(name, cfg):
    """the DLE command line that makes DLE's parser give cfg"""
    args = []
    if name == "Tacotron2":
        if cfg.get("mask_padding"):
            sys.exit("tacotron2_peer: mask_padding=True cannot be given on DLE's command line")
        for k, flag in T2_FLAGS.items():
            args += [flag, str(cfg[k])]
        if cfg["decoder_no_early_stopping"]:
            args.append("--decoder-no-early-stopping")
    else:
        for k, flag in WG_FLAGS.items():
            args += [flag, str(cfg[k])]
        for k, flag in WN_FLAGS.items():
            args += [flag, str(cfg["WN_config"][k])]
    return args


def reset_parser(name):
    """DLE's tacotron2_parser rebinds its module's global `symbols` to an argument group, so a
    second call finds no symbol list; put the list back before each use"""
    if name == "Tacotron2":
        import tacotron2.arg_parser
        from tacotron2.text import symbols
        tacotron2.arg_parser.symbols = symbols


def dle_config(dle, name, argv):
    reset_parser(name)
    parser = dle.models.model_parser(name, argparse.ArgumentParser(add_help=False))
    args, _ = parser.parse_known_args(argv)
    return dle.models.get_model_config(name, args)


def export(a):
    dle = import_dle(a.dle)
    t2_cfg = dle_config(dle, "Tacotron2", ["--max-decoder-steps", str(a.steps)])
    wg_cfg = dle_config(dle, "WaveGlow", ["--wn-channels", "256"])
    torch.manual_seed(a.seed)
    t2 = dle.models.get_model("Tacotron2", t2_cfg, cpu_run=True)
    with torch.no_grad():
        t2.decoder.gate_layer.linear_layer.bias.fill_(GATE_BIAS)
    torch.manual_seed(a.seed)
    wg = dle.models.get_model("WaveGlow", wg_cfg, cpu_run=True)
    os.makedirs(a.out, exist_ok=True)
    torch.save({"epoch": 0, "config": t2_cfg, "state_dict": t2.state_dict()},
               os.path.join(a.out, "checkpoint_Tacotron2_0.pt"))
    torch.save({"epoch": 0, "config": wg_cfg, "state_dict": wg.state_dict()},
               os.path.join(a.out, "checkpoint_WaveGlow_0.pt"))
    print(json.dumps({"tacotron2_params": sum(p.numel() for p in t2.parameters()),
                      "waveglow_params": sum(p.numel() for p in wg.parameters()),
                      "max_decoder_steps": a.steps, "gate_bias": GATE_BIAS,
                      "wn_channels": wg_cfg["WN_config"]["n_channels"]}))


def load(dle, a, name, fp16, cpu):
    """DLE's inference.load_and_setup_model, its model parser reading the saved config as flags"""
    path = os.path.join(a.out, f"checkpoint_{name}_0.pt")
    cfg = torch.load(path, map_location="cpu")["config"]
    argv = config_args(name, cfg)
    if dle_config(dle, name, argv) != cfg:
        sys.exit(f"tacotron2_peer: {path}: DLE's parser does not reproduce the saved config")
    saved = sys.argv
    sys.argv = [saved[0]] + argv
    reset_parser(name)
    try:
        model = dle.inference.load_and_setup_model(
            name, argparse.ArgumentParser(add_help=False), path, fp16, cpu,
            forward_is_infer=True, jittable=True)
    finally:
        sys.argv = saved
    return model, cfg


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [ln.rstrip("\r\n") for ln in f if ln.strip()]


def time_modes(a):
    dle = import_dle(a.dle)
    cpu = a.device == "cpu"
    if not cpu and a.device != "cuda":
        torch.cuda.set_device(torch.device(a.device))
    lines = read_lines(a.text_file)
    if not lines:
        sys.exit(f"tacotron2_peer: {a.text_file} holds no text")
    from tacotron2.text import text_to_sequence
    print(json.dumps({"lines": len(lines), "chars": [len(s) for s in lines],
                      "ids": [len(text_to_sequence(s, ["english_cleaners"])) for s in lines]}),
          file=sys.stderr)
    MeasureTime = dle.inference.MeasureTime
    for mode in a.modes.split(","):
        fp16 = mode in ("fp16", "jit-fp16", "compile", "compile-cg")
        try:
            t2, t2_cfg = load(dle, a, "Tacotron2", fp16, cpu)
            wg, _ = load(dle, a, "WaveGlow", fp16, cpu)
            denoiser = dle.Denoiser(wg)
            if not cpu:
                denoiser.cuda()
            if mode.startswith("jit"):
                wg.make_ts_scriptable()
                wg = torch.jit.script(wg)
                t2 = torch.jit.script(t2)
            elif mode.startswith("compile"):
                kw = {"mode": "reduce-overhead"} if mode == "compile-cg" else {}
                dec = t2.decoder
                dec.decode = torch.compile(dec.decode, **kw)
                dec.prenet = torch.compile(dec.prenet, **kw)
                t2.postnet = torch.compile(t2.postnet, **kw)
                wg.infer = torch.compile(wg.infer, **kw)
            elif mode not in ("fp32", "fp16"):
                raise ValueError(f"unknown mode {mode}")
        except Exception as ex:  # noqa: BLE001 — report a mode that fails, go on
            print(json.dumps({"impl": "pytorch", "mode": mode, "error": repr(ex)[:300]}),
                  flush=True)
            continue
        # TorchScript models are called (forward is infer), eager ones through .infer
        t2_infer = t2 if mode.startswith("jit") else t2.infer
        wg_infer = wg if mode.startswith("jit") else wg.infer
        for batch in [int(b) for b in a.batches.split(",")]:
            texts = [lines[i % len(lines)] for i in range(batch)]
            out = {}

            def run():
                m = {}
                with torch.no_grad():
                    with MeasureTime(m, "text", cpu):
                        seq, lens = dle.inference.prepare_input_sequence(texts, cpu)
                    with MeasureTime(m, "tacotron2", cpu):
                        mel, mel_lengths, _ = t2_infer(seq, lens)
                    with MeasureTime(m, "waveglow", cpu):
                        audios = wg_infer(mel, sigma=a.sigma).float()
                    with MeasureTime(m, "denoiser", cpu):
                        audios = denoiser(audios, strength=a.denoising_strength).squeeze(1)
                    with MeasureTime(m, "host", cpu):
                        audios = audios.cpu()
                out["audio"], out["mel"], out["lengths"] = audios, mel, mel_lengths
                return m

            if not cpu:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            try:
                for _ in range(a.warmup):
                    run()
                runs, t_end = [], time.time() + a.min_time
                while len(runs) < a.min_runs or time.time() < t_end:
                    runs.append(run())
            except Exception as ex:  # noqa: BLE001
                print(json.dumps({"impl": "pytorch", "mode": mode, "batch": batch,
                                  "error": repr(ex)[:300]}), flush=True)
                continue

            def med(key):
                return round(statistics.median(r[key] for r in runs) * 1000, 3)

            ms = round(statistics.median(sum(r.values()) for r in runs) * 1000, 3)
            samples = out["audio"].shape[0] * out["audio"].shape[1]
            audio_s = samples / a.sampling_rate
            print(json.dumps({
                "impl": "pytorch", "device": a.device, "mode": mode, "batch": batch, "ms": ms,
                "tacotron2_ms": med("tacotron2"), "waveglow_ms": med("waveglow"),
                "denoiser_ms": med("denoiser"), "text_ms": med("text"), "host_ms": med("host"),
                "runs": len(runs), "decoder_steps": out["mel"].shape[2],
                "mel_lengths": sorted(set(int(x) for x in out["lengths"])),
                "samples": samples, "samples_per_s": round(samples / (ms / 1000), 1),
                "audio_s": round(audio_s, 3), "rtf": round(ms / 1000 / audio_s, 5),
                "peak_mem_mb": None if cpu else
                round(torch.cuda.max_memory_allocated() / 2**20)}), flush=True)
        del t2, wg, denoiser, t2_infer, wg_infer
        if mode.startswith("compile"):
            torch._dynamo.reset()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("export", "time"))
    ap.add_argument("--dle", required=True, help="DLE's PyTorch/SpeechSynthesis/Tacotron2")
    ap.add_argument("--out", required=True, help="checkpoint directory (export writes it)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=600, help="decoder steps (max_decoder_steps)")
    ap.add_argument("--text-file")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--modes", default="fp32,fp16,compile")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--min-runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--sigma", type=float, default=0.9, help="inference.py's default")
    ap.add_argument("--denoising-strength", type=float, default=0.01,
                    help="inference.py's default")
    ap.add_argument("--sampling-rate", type=int, default=22050)
    a = ap.parse_args()
    if a.mode == "time" and not a.text_file:
        ap.error("time needs --text-file")
    export(a) if a.mode == "export" else time_modes(a)


if __name__ == "__main__":
    main()
