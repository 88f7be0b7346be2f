#!/usr/bin/env python3
# dle_jasper_reference.py — reference outputs of NVIDIA DeepLearningExamples' own Jasper /
# QuartzNet code for a model yaml of your choice (seeded random weights, calibrated batch norms),
# to check hark on configurations the J1 goldens do not cover; the layout is the golden sets'.
# Tests: tests/model/jasper/test_jasper_dle.c (runs it when $HARK_DLE_SRC is set).
"""Reference outputs of DLE's Jasper / QuartzNet for one model yaml and seed.

    dle_jasper_reference.py --dle-root SRC --config MODEL.yaml --out DIR
        [--seed 1] [--filters-div 1] [--checkpoint FILE.pt] [--pad-leading N]
        [--audio-dir ../shared/data/audio/en] [--utt NAME[:N] ...] [--calib NAME ...]
        [--branch-gain G] [--beta-mean B] [--target-blank F] [--logit-std 3]

SRC is a DeepLearningExamples tree: the repository root, its PyTorch/SpeechRecognition folder, or
the Jasper / QuartzNet folder itself (the yaml's section, `jasper:` or `quartznet:`, picks which).
Nothing in it is edited. The DLE modules used are those the J1 golden README lists
(../shared/data/golden/jasper/README.md): common/audio.py AudioSegment, common/dataset.py
collate_fn, common/features.py FilterbankFeatures, <arch>/config.py load/input/encoder/decoder,
<arch>/model.py (the model class, GreedyCTCDecoder), common/helpers.py add_ctc_blank,
gather_predictions, Checkpointer.save (and convert_v1_state_dict for Jasper),
common/optimizers.py Novograd (only for the checkpoint's layout). inference.py itself needs CUDA,
apex and dllogger, so its loop is replayed step by step with those objects:
feat_proc(audio, audio_lens) -> (Jasper) F.pad(feats, (pad_leading, 0)), feat_lens += pad_leading
-> model(feats, feat_lens) -> GreedyCTCDecoder()(log_probs) -> helpers.gather_predictions.

Packages DLE imports that Debian's python3 lacks are replaced by import shims (see
install_shims): librosa (filters.mel is a numpy transcription of librosa 0.9.0's Slaney mel, the
version DLE pins; the test checks it bit for bit against the J1 golden's mel_fb.npy), sox,
soundfile (when missing: 16/32-bit PCM WAV through the wave module, scaled as libsndfile does)
and inflect (when missing). Runs with Debian's python3-torch (1.13, CPU), one thread,
deterministic algorithms.

The model: the yaml is loaded with DLE's config.load, every encoder block's `filters` (and the
decoder's in_feats) divided by --filters-div, input_val's dither set to 0 (DLE adds 1e-5 * randn
even at inference), and written to DIR/model.yaml, from which the model is built. Unless
--checkpoint names weights to use, they are drawn from --seed: conv weights N(0, 1/fan_in) times a
per-layer factor 10^U(-1, 0.3); batch norm gamma U(0.5, 1.5), beta N(beta_mean, 0.25); the last
batch norm of every residual block's main branch scaled by --branch-gain (an undamped random net
is chaotic: float32 and float64 greedy ids part); running statistics = the cumulative train-mode
batch statistics over the calibration wavs, then perturbed (mean += 0.1 sd N(0,1),
var *= e^U(-0.2,0.2)); decoder weight scaled to a logit std of --logit-std over the calibration
frames, biases N(0, 0.5), the blank's bias set so that blank wins on --target-blank of them. The
checkpoint is written by DLE's Checkpointer.save (ema_state_dict = state_dict, as the J1 set),
then loaded back as inference.py --ema does into a model built afresh, which makes the outputs.

DIR receives (shapes as in the J1 README):
  model.yaml, <Jasper|QuartzNet>_epoch1_checkpoint.pt, labels.json, mel_fb.npy, stft_window.npy,
  manifest.json (configuration, randomisation, versions, the state dict's keys and shapes),
  uttK_<name>/ waveform.npy [n], features.npy [n_filt, T_feat] (batch of one), logits.npy and
      log_probs.npy [T_out, V], greedy_ids.npy [T_out] int32 (every frame, as inference.py),
      result.json (lengths, text_inference_py, text_valid_frames, blank fraction, the float64
      model's max |d| on the same features, the smallest top-1 / top-2 log-prob margin);
      utt0_*/intermediate/ model_input.npy [n_filt, T_in], blockNN_out.npy [C, T] (each encoder
      layer's output, padded frames included);
  batch/ features.npy [B, n_filt, T_feat], feat_lens.npy, log_probs.npy [B, T_out, V],
      out_lens.npy, greedy_ids.npy [B, T_out] (DLE's collate_fn zero-padded batch of every
      utterance), result.json (texts_inference_py, texts_valid_frames).
Exit status 0 = everything written.
"""

import argparse
import copy
import hashlib
import json
import math
import os
import sys
import types
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_AUDIO = os.path.join(HERE, "..", "..", "shared", "data", "audio", "en")
# the J1 README's utterances (utt0 cropped below 2 s) and calibration wavs
DEFAULT_UTTS = ["lj-LJ001-0013:28037", "deepspeech-LDC93S1",
                "librivox-sense_and_sensibility_01_austen_64kb-0890", "jfk"]
DEFAULT_CALIB = ["lj-LJ001-0001", "lj-LJ001-0011", "librispeech-1995-1837-0001", "sb-spk1_snt1",
                 "librivox-sense_and_sensibility_01_austen_64kb-0880", "lj-LJ001-0029"]
ARCHS = {"jasper": ("Jasper", "jasper", "Jasper"), "quartznet": ("QuartzNet", "quartznet",
                                                                 "QuartzNet")}


def fail(msg):
    print(f"dle_jasper_reference: {msg}", file=sys.stderr)
    sys.exit(1)


# ---- import shims ------------------------------------------------------------------------------

def slaney_mel(*, sr, n_fft, n_mels=128, fmin=0.0, fmax=None, htk=False, norm="slaney",
               dtype=np.float32):
    """librosa 0.9.0 filters.mel for the Slaney scale and area normalisation (what DLE calls):
    triangles between n_mels + 2 edges evenly spaced on the Slaney mel scale, evaluated at the
    rfft bin frequencies in float64, stored into a float32 array, then each row multiplied by
    2 / (its upper edge - its lower edge) and rounded to float32 again."""
    if htk or norm != "slaney":
        raise NotImplementedError("the librosa stand-in implements htk=False, norm='slaney' only")
    if fmax is None:
        fmax = float(sr) / 2
    f_sp = 200.0 / 3          # Hz per mel below 1 kHz
    brk_hz = 1000.0           # where the scale turns logarithmic
    brk_mel = brk_hz / f_sp
    step = np.log(6.4) / 27.0

    def to_mel(f):
        f = np.asanyarray(f, dtype=np.float64)
        m = f / f_sp
        if f.ndim:
            hi = f >= brk_hz
            m[hi] = brk_mel + np.log(f[hi] / brk_hz) / step
        elif f >= brk_hz:
            m = brk_mel + np.log(f / brk_hz) / step
        return m

    def to_hz(m):
        m = np.asanyarray(m, dtype=np.float64)
        f = f_sp * m
        hi = m >= brk_mel
        f[hi] = brk_hz * np.exp(step * (m[hi] - brk_mel))
        return f

    n_mels = int(n_mels)
    bins = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    edges = to_hz(np.linspace(to_mel(fmin), to_mel(fmax), n_mels + 2))
    widths = np.diff(edges)
    dist = np.subtract.outer(edges, bins)
    w = np.zeros((n_mels, 1 + n_fft // 2), dtype=dtype)
    for i in range(n_mels):
        rise = -dist[i] / widths[i]
        fall = dist[i + 2] / widths[i + 1]
        w[i] = np.maximum(0, np.minimum(rise, fall))
    w *= (2.0 / (edges[2:n_mels + 2] - edges[:n_mels]))[:, np.newaxis]
    return w


class _WavFile:
    """soundfile.SoundFile for PCM WAV (16 or 32 bit) through the wave module: read(dtype=
    'float32'/'float64') scales by 2^-(bits-1) as libsndfile does, 'int16'/'int32' as stored
    (int16 data widened to int32 by a 16-bit shift, as libsndfile)."""

    def __init__(self, path, mode="r"):
        if mode != "r":
            raise ValueError("the soundfile stand-in reads only")
        self._w = wave.open(path, "rb")
        self.samplerate = self._w.getframerate()
        self.channels = self._w.getnchannels()
        self.frames = self._w.getnframes()
        self._width = self._w.getsampwidth()
        if self._width not in (2, 4):
            raise RuntimeError(f"{path}: {8 * self._width}-bit PCM is not supported by the "
                               f"soundfile stand-in (16 or 32)")

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self._w.close()

    def seek(self, frame):
        self._w.setpos(frame)

    def read(self, frames=-1, dtype="float64"):
        n = self.frames - self._w.tell() if frames < 0 else frames
        raw = np.frombuffer(self._w.readframes(n), dtype="<i2" if self._width == 2 else "<i4")
        raw = raw.reshape(-1, self.channels)
        bits = 8 * self._width
        if dtype in ("float32", "float64"):
            out = raw.astype(dtype) * np.array(2.0 ** -(bits - 1), dtype=dtype)
        elif dtype == "int32":
            out = raw.astype(np.int32) << (32 - bits)
        elif dtype == "int16" and bits == 16:
            out = raw.copy()
        else:
            raise ValueError(f"dtype {dtype} is not supported by the soundfile stand-in")
        return out[:, 0] if self.channels == 1 else out


def _not_here(name):
    def f(*a, **k):
        raise RuntimeError(f"{name} is an import shim of dle_jasper_reference.py: this DLE code "
                           f"path (perturbation, resampling, silence trimming) is not supported")
    return f


def install_shims():
    """Modules DLE imports that Debian's python3 lacks. librosa is always the stand-in (the
    numbers of the version DLE pins); soundfile and inflect only when missing."""
    lib = types.ModuleType("librosa")
    lib.__version__ = "0.9.0 (dle_jasper_reference stand-in)"
    lib.filters = types.SimpleNamespace(mel=slaney_mel)
    lib.effects = types.SimpleNamespace(trim=_not_here("librosa.effects.trim"),
                                        time_stretch=_not_here("librosa.effects.time_stretch"))
    lib.resample = _not_here("librosa.resample")
    sys.modules["librosa"] = lib
    sys.modules["librosa.filters"] = lib.filters
    sys.modules["librosa.effects"] = lib.effects
    sox = types.ModuleType("sox")
    sox.Transformer = _not_here("sox.Transformer")
    sys.modules["sox"] = sox
    try:
        import soundfile  # noqa: F401 (the real one when present)
    except ImportError:
        sf = types.ModuleType("soundfile")
        sf.SoundFile = _WavFile
        sys.modules["soundfile"] = sf
    try:
        import inflect  # noqa: F401
    except ImportError:
        inf = types.ModuleType("inflect")
        inf.engine = lambda: types.SimpleNamespace(number_to_words=_not_here("inflect"))
        sys.modules["inflect"] = inf
    if not hasattr(np, "sctypes"):  # numpy 2 dropped it; AudioSegment reads it
        np.sctypes = {"int": [np.int8, np.int16, np.int32, np.int64],
                      "uint": [np.uint8, np.uint16, np.uint32, np.uint64],
                      "float": [np.float16, np.float32, np.float64], "complex": [], "others": []}


def find_arch_dir(root, arch):
    folder = ARCHS[arch][0]
    for d in (root, os.path.join(root, folder),
              os.path.join(root, "PyTorch", "SpeechRecognition", folder)):
        if (os.path.isfile(os.path.join(d, ARCHS[arch][1], "model.py")) and
                os.path.isfile(os.path.join(d, "common", "features.py"))):
            return os.path.abspath(d)
    fail(f"{root}: no DLE {folder} folder (<root>/PyTorch/SpeechRecognition/{folder} with "
         f"{ARCHS[arch][1]}/model.py and common/features.py)")


# ---- helpers -----------------------------------------------------------------------------------

def save(path, a):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, np.ascontiguousarray(a))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def margins(lp):
    """top-1 minus top-2 log-prob of every frame of lp [T, V]."""
    s = np.sort(lp, axis=1)
    return s[:, -1] - s[:, -2]


# ---- main --------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dle-root", required=True, help="DeepLearningExamples tree")
    ap.add_argument("--config", required=True, help="DLE model yaml (jasper: or quartznet:)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--filters-div", type=int, default=1,
                    help="divide every block's filters (and decoder in_feats) by this")
    ap.add_argument("--checkpoint",
                    help="use this DLE checkpoint's weights instead of drawing them "
                         "(ema_state_dict when present, as inference.py --ema)")
    ap.add_argument("--pad-leading", type=int, default=None,
                    help="zero frames before the features (default: Jasper 16, QuartzNet 0)")
    ap.add_argument("--audio-dir", default=DEFAULT_AUDIO, help="folder with wav/<name>.wav")
    ap.add_argument("--utt", nargs="+", default=DEFAULT_UTTS,
                    help="utterances NAME or NAME:N (the first N samples)")
    ap.add_argument("--calib", nargs="+", default=DEFAULT_CALIB,
                    help="wavs that calibrate the batch norms and the blank bias")
    ap.add_argument("--branch-gain", type=float, default=None,
                    help="residual main branch's last BN gamma factor (Jasper 0.5, QuartzNet 0.3)")
    ap.add_argument("--beta-mean", type=float, default=None, help="(Jasper 0.3, QuartzNet 0.5)")
    ap.add_argument("--target-blank", type=float, default=None,
                    help="fraction of calibration frames where blank wins (Jasper 0.6, "
                         "QuartzNet 0.4)")
    ap.add_argument("--logit-std", type=float, default=3.0)
    a = ap.parse_args()

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import yaml

    with open(a.config, encoding="utf-8") as f:
        y0 = yaml.safe_load(f)
    if not isinstance(y0, dict):
        fail(f"{a.config}: not a yaml mapping")
    archs = [k for k in ARCHS if k in y0]
    if len(archs) != 1:
        fail(f"{a.config}: needs exactly one of the sections 'jasper' or 'quartznet'")
    arch = archs[0]
    folder, pkg, cls_name = ARCHS[arch]
    is_jasper = arch == "jasper"
    pad_leading = a.pad_leading if a.pad_leading is not None else (16 if is_jasper else 0)
    gain = a.branch_gain if a.branch_gain is not None else (0.5 if is_jasper else 0.3)
    beta_mean = a.beta_mean if a.beta_mean is not None else (0.3 if is_jasper else 0.5)
    target_blank = a.target_blank if a.target_blank is not None else (0.6 if is_jasper else 0.4)
    if a.filters_div < 1:
        fail("--filters-div must be >= 1")

    dle = find_arch_dir(os.path.abspath(a.dle_root), arch)
    install_shims()
    sys.path.insert(0, dle)
    import importlib
    config = importlib.import_module(f"{pkg}.config")
    model_mod = importlib.import_module(f"{pkg}.model")
    helpers = importlib.import_module("common.helpers")
    audio_mod = importlib.import_module("common.audio")
    dataset_mod = importlib.import_module("common.dataset")
    features_mod = importlib.import_module("common.features")
    optimizers = importlib.import_module("common.optimizers")
    Model = getattr(model_mod, cls_name)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(a.seed)
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)

    # the yaml as DLE loads it, narrowed and without dither, written for the converter
    cfg = config.load(a.config)
    enc = cfg[arch]["encoder"]
    for blk in enc["blocks"]:
        if blk["filters"] % a.filters_div:
            fail(f"filters {blk['filters']} is not a multiple of --filters-div {a.filters_div}")
        blk["filters"] //= a.filters_div
    dec = cfg[arch].setdefault("decoder", {})
    if "in_feats" in dec:
        dec["in_feats"] //= a.filters_div
    iv = cfg["input_val"]["filterbank_features"]
    dither_was = iv.get("dither")
    iv["dither"] = 0.0
    yaml_path = os.path.join(out, "model.yaml")
    with open(yaml_path, "w", encoding="utf-8") as f:
        f.write(f"# dle_jasper_reference.py: {os.path.basename(a.config)}, filters / "
                f"{a.filters_div}, input_val dither {dither_was} -> 0.0\n")
        yaml.safe_dump(cfg, f, sort_keys=False)
    cfg = config.load(yaml_path)

    symbols = helpers.add_ctc_blank(cfg["labels"])
    blank = len(symbols) - 1
    _, features_kw = config.input(cfg, "val")
    feat_proc = features_mod.FilterbankFeatures(**features_kw)
    feat_proc.eval()
    sr = features_kw["sample_rate"]

    def build():
        c = copy.deepcopy(cfg)  # JasperEncoder edits the block dicts it is given
        return Model(encoder_kw=config.encoder(c), decoder_kw=config.decoder(c, len(symbols)))

    def load_wav(spec):
        name, _, crop = spec.partition(":")
        path = os.path.join(a.audio_dir, "wav", name + ".wav")
        if not os.path.isfile(path):
            fail(f"{path}: no such wav")
        seg = audio_mod.AudioSegment(path, target_sr=None, int_values=False)
        if seg.sample_rate != sr:
            fail(f"{path}: {seg.sample_rate} Hz, the model's front end takes {sr} Hz (DLE would "
                 f"resample with librosa; not here)")
        x = seg.samples
        if crop:
            x = x[:int(crop)]
        key = name + (f"-crop{int(crop)}" if crop else "")
        return key, torch.tensor(x, dtype=torch.float)

    def collate(waves):  # DLE's dataset items -> collate_fn
        items = [(w, torch.tensor([w.shape[0]]).int(), torch.LongTensor([0]),
                  torch.LongTensor([0])) for w in waves]
        return dataset_mod.collate_fn(items)

    def model_input(model_, waves):
        """inference.py's loop up to the model input: features and lengths."""
        audio, audio_lens, _, _ = collate(waves)
        feats, feat_lens = feat_proc(audio, audio_lens)
        x = F.pad(feats, (pad_leading, 0)) if pad_leading else feats
        x_lens = feat_lens + pad_leading
        return feats, feat_lens, x, x_lens

    def run_model(model_, x, x_lens):
        if model_.encoder.use_conv_masks:
            lp, lp_lens = model_(x, x_lens)
        else:
            lp, lp_lens = model_(x, x_lens), None
        return lp, lp_lens

    def valid_out_len(model_, x_lens):
        """encoder output lengths: DLE's own with conv masks; else the masked convs' rule
        (DLE computes none then)."""
        lens = x_lens.clone().long()
        for layer in model_.encoder.layers:
            convs = layer.mconv if hasattr(layer, "mconv") else layer.conv
            for c in convs:
                if isinstance(c, nn.Conv1d):
                    p, k, s, d = c.padding[0], c.kernel_size[0], c.stride[0], c.dilation[0]
                    lens = torch.div(lens + 2 * p - d * (k - 1) - 1, s,
                                     rounding_mode="floor") + 1
        return lens

    calib = [load_wav(n)[1] for n in a.calib]
    utts = [load_wav(n) for n in a.utt]
    randomization = None

    model = build()
    if a.checkpoint:
        ck = torch.load(a.checkpoint, map_location="cpu")
        sd = ck.get("ema_state_dict") or ck["state_dict"]
        if is_jasper:
            sd = helpers.convert_v1_state_dict(sd)
        model.load_state_dict(sd, strict=True)
        ckpt_path = os.path.abspath(a.checkpoint)
    else:
        g = torch.Generator().manual_seed(a.seed)

        def unif(lo, hi, shape):
            return lo + (hi - lo) * torch.rand(shape, generator=g)

        with torch.no_grad():
            bns = []
            for m in model.encoder.modules():
                if isinstance(m, nn.Conv1d):
                    fan_in = m.weight.shape[1] * m.weight.shape[2]
                    f = 10.0 ** float(unif(-1.0, 0.3, ()))
                    m.weight.copy_(torch.randn(m.weight.shape, generator=g) * f /
                                   math.sqrt(fan_in))
                elif isinstance(m, nn.BatchNorm1d):
                    m.weight.copy_(unif(0.5, 1.5, m.weight.shape))
                    m.bias.copy_(beta_mean + 0.25 * torch.randn(m.bias.shape, generator=g))
                    bns.append(m)
            for layer in model.encoder.layers:
                if layer.res is not None:  # damp the main branch of residual blocks
                    convs = layer.mconv if hasattr(layer, "mconv") else layer.conv
                    [m for m in convs if isinstance(m, nn.BatchNorm1d)][-1].weight.mul_(gain)
            # running statistics: cumulative train-mode batch statistics (dropout off)
            for m in bns:
                m.reset_running_stats()
                m.momentum = None
            model.train()
            for m in model.modules():
                if isinstance(m, nn.Dropout):
                    m.eval()
            for w in calib:
                _, _, x, x_lens = model_input(model, [w])
                run_model(model, x, x_lens)
            model.eval()
            for m in bns:
                m.momentum = 0.1
                sd_ = m.running_var.sqrt()
                m.running_mean.add_(0.1 * sd_ * torch.randn(sd_.shape, generator=g))
                m.running_var.mul_(torch.exp(unif(-0.2, 0.2, sd_.shape)))
            # the head: logit scale, biases, the blank's share of the calibration frames
            head = model.decoder.layers[0]
            enc_out = []
            hook = head.register_forward_hook(lambda mod, inp, o: enc_out.append(inp[0]))
            for w in calib:
                _, _, x, x_lens = model_input(model, [w])
                run_model(model, x, x_lens)
                n = int(valid_out_len(model, x_lens)[0])
                enc_out[-1] = enc_out[-1][0, :, :n]
            hook.remove()
            h = torch.cat(enc_out, dim=1)  # (C, frames)
            head.weight.copy_(torch.randn(head.weight.shape, generator=g))
            z = head.weight[:, :, 0] @ h
            head.weight.mul_(a.logit_std / float(z.std()))
            head.bias.copy_(0.5 * torch.randn(head.bias.shape, generator=g))
            z = head.weight[:, :, 0] @ h + head.bias[:, None]
            others = torch.cat([z[:blank], z[blank + 1:]]).max(dim=0).values
            gap = (z[blank] - others).numpy()
            head.bias[blank] -= float(np.quantile(gap, 1.0 - target_blank))
        randomization = {"seed": a.seed, "conv": "N(0, 1/fan_in) * 10^U(-1, 0.3) per layer",
                         "bn_gamma": "U(0.5, 1.5)", "bn_beta_mean": beta_mean,
                         "bn_beta_std": 0.25, "branch_gain": gain,
                         "running_stats": "cumulative train-mode batch statistics over the "
                                          "calibration wavs, mean += 0.1 sd N(0,1), "
                                          "var *= e^U(-0.2,0.2)",
                         "logit_std": a.logit_std, "decoder_bias_std": 0.5,
                         "target_blank": target_blank}
        # DLE's Checkpointer, as train.py saves (the model doubles as its EMA copy)
        opt = optimizers.Novograd(model.parameters(), lr=1e-3, betas=(0.95, 0.5),
                                  weight_decay=1e-3)
        scaler = torch.cuda.amp.GradScaler(enabled=False)
        for f in os.listdir(out):
            if f.endswith("_checkpoint.pt"):
                os.remove(os.path.join(out, f))
        helpers.Checkpointer(out, cls_name).save(model, model, opt, scaler, epoch=1, step=1000,
                                                  best_wer=1.0)
        ckpt_path = os.path.join(out, f"{cls_name}_epoch1_checkpoint.pt")

    # inference.py: a model built afresh, the checkpoint's ema_state_dict loaded strictly
    ck = torch.load(ckpt_path, map_location="cpu")
    sd = ck["ema_state_dict"] if ck.get("ema_state_dict") is not None else ck["state_dict"]
    if is_jasper:
        sd = helpers.convert_v1_state_dict(sd)
    model = build()
    model.load_state_dict(sd, strict=True)
    model.eval()
    model64 = copy.deepcopy(model).double()
    greedy = model_mod.GreedyCTCDecoder()
    head = model.decoder.layers[0]

    def infer(waves, blocks=None):
        feats, feat_lens, x, x_lens = model_input(model, waves)
        logits = []
        hooks = [head.register_forward_hook(lambda mod, inp, o: logits.append(o))]
        if blocks is not None:
            for i, layer in enumerate(model.encoder.layers):
                hooks.append(layer.register_forward_hook(
                    lambda mod, inp, o, i=i: blocks.append((i, o[0][-1]))))
        lp, lp_lens = run_model(model, x, x_lens)
        for hk in hooks:
            hk.remove()
        preds = greedy(lp)
        texts = helpers.gather_predictions([preds], symbols)
        out_lens = lp_lens if lp_lens is not None else valid_out_len(model, x_lens)
        lp64, _ = run_model(model64, x.double(), x_lens)
        return dict(feats=feats, feat_lens=feat_lens, x=x, x_lens=x_lens, lp=lp,
                    out_lens=out_lens.int(), logits=logits[0].transpose(1, 2), preds=preds,
                    texts=texts, lp64=lp64)

    def text_of(ids):
        return helpers.gather_predictions([torch.tensor(np.asarray(ids))[None]], symbols)[0]

    save(os.path.join(out, "mel_fb.npy"), feat_proc.fb[0].numpy())
    save(os.path.join(out, "stft_window.npy"), feat_proc.window.numpy())
    with open(os.path.join(out, "labels.json"), "w") as f:
        json.dump({"config_labels": cfg["labels"], "symbols": symbols, "blank_index": blank}, f,
                  indent=1)

    utt_dirs, summary = [], []
    with torch.no_grad():
        for k, (key, w) in enumerate(utts):
            blocks = [] if k == 0 else None
            r = infer([w], blocks)
            d = os.path.join(out, f"utt{k}_{key}")
            utt_dirs.append(os.path.basename(d))
            lp = r["lp"][0].numpy()
            n_out = int(r["out_lens"][0])
            ids = r["preds"][0].numpy().astype(np.int32)
            save(os.path.join(d, "waveform.npy"), w.numpy())
            save(os.path.join(d, "features.npy"), r["feats"][0].numpy())
            save(os.path.join(d, "logits.npy"), r["logits"][0].numpy())
            save(os.path.join(d, "log_probs.npy"), lp)
            save(os.path.join(d, "greedy_ids.npy"), ids)
            if blocks is not None:
                save(os.path.join(d, "intermediate", "model_input.npy"), r["x"][0].numpy())
                for i, t in blocks:
                    save(os.path.join(d, "intermediate", f"block{i:02d}_out.npy"), t[0].numpy())
            valid = ids[:n_out]
            mg = margins(lp)
            res = {"key": key, "n_samples": int(w.shape[0]),
                   "feat_len": int(r["feat_lens"][0]), "feat_T_padded": int(r["feats"].shape[2]),
                   "model_in_len": int(r["x_lens"][0]), "model_in_T": int(r["x"].shape[2]),
                   "out_len": n_out, "out_T": int(lp.shape[0]),
                   "text_inference_py": r["texts"][0], "text_valid_frames": text_of(valid),
                   "blank_frac_valid": round(float(np.mean(valid == blank)), 4),
                   "distinct_labels_valid": int(len(set(valid.tolist()) - {blank})),
                   "min_margin_valid": float(mg[:n_out].min()),
                   "min_margin_all": float(mg.min()),
                   "max_abs_diff_log_probs_float64_model":
                       float((r["lp64"][0, :n_out] - r["lp"][0, :n_out].double()).abs().max()),
                   "greedy_valid_equal_float64":
                       bool((r["lp64"][0, :n_out].argmax(-1).int().numpy() == valid).all())}
            with open(os.path.join(d, "result.json"), "w") as f:
                json.dump(res, f, indent=1)
            summary.append(res)
            print(f"{os.path.basename(d)}: out {n_out}/{lp.shape[0]} frames, blank "
                  f"{res['blank_frac_valid']:.2f}, {res['distinct_labels_valid']} labels, min "
                  f"margin {res['min_margin_valid']:.2g}, float64 max|d| "
                  f"{res['max_abs_diff_log_probs_float64_model']:.2g}: "
                  f"'{res['text_inference_py']}'")

        # DLE's padded batch of every utterance (collate_fn zero padding)
        r = infer([w for _, w in utts])
        d = os.path.join(out, "batch")
        lp = r["lp"].numpy()
        ids = r["preds"].numpy().astype(np.int32)
        save(os.path.join(d, "features.npy"), r["feats"].numpy())
        save(os.path.join(d, "feat_lens.npy"), r["feat_lens"].numpy().astype(np.int32))
        save(os.path.join(d, "log_probs.npy"), lp)
        save(os.path.join(d, "out_lens.npy"), r["out_lens"].numpy().astype(np.int32))
        save(os.path.join(d, "greedy_ids.npy"), ids)
        ol = r["out_lens"].numpy()
        bres = {"order": [key for key, _ in utts], "utterances": utt_dirs,
                "audio_padded_len": max(int(w.shape[0]) for _, w in utts),
                "texts_inference_py": r["texts"],
                "texts_valid_frames": [text_of(ids[b, :ol[b]]) for b in range(len(utts))],
                "min_margin_valid": [float(margins(lp[b])[:ol[b]].min())
                                     for b in range(len(utts))]}
        with open(os.path.join(d, "result.json"), "w") as f:
            json.dump(bres, f, indent=1)

    # how far greedy ids are from float noise: the smallest top-1 / top-2 gap anywhere
    mm_valid = min([u["min_margin_valid"] for u in summary] + bres["min_margin_valid"])
    mm_all = min([u["min_margin_all"] for u in summary] +
                 [float(margins(lp[b]).min()) for b in range(len(utts))])
    sd = model.state_dict()
    manifest = {
        "tool": "tools/dle_jasper_reference.py", "arch": arch, "dle_folder": dle,
        "dle_sha256": {p: sha256(os.path.join(dle, p)) for p in
                       (f"{pkg}/model.py", f"{pkg}/config.py", "common/features.py",
                        "common/helpers.py", "common/dataset.py", "common/audio.py")},
        "config": os.path.abspath(a.config), "filters_div": a.filters_div,
        "dither_in_config": dither_was, "pad_leading": pad_leading,
        "checkpoint": os.path.basename(ckpt_path), "weights_from": a.checkpoint or "random",
        "randomization": randomization, "calibration_wavs": a.calib, "utterances": utt_dirs,
        "min_margin": {"valid_frames": mm_valid, "all_frames": mm_all},
        "features_kw": {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v))
                        for k, v in features_kw.items()},
        "torch": torch.__version__, "numpy": np.__version__,
        "n_params": int(sum(p.numel() for p in model.parameters())),
        "state_dict": {k: list(v.shape) for k, v in sd.items()},
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {out}: {cls_name}, {len(model.encoder.layers)} layers, "
          f"{manifest['n_params']} parameters; smallest top-2 log-prob margin {mm_valid:.3g} "
          f"on valid frames, {mm_all:.3g} on all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
