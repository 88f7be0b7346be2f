"""QuartzNet reference for tests/model/jasper/test_quartznet.c (no QuartzNet golden is shared):
writes a small seeded QuartzNet (time-channel separable blocks, stride-2 separable prologue,
kernel_size_factor, dilated separable epilogue, plain 1x1 conv) as a DLE-style yaml + checkpoint,
converts it with tools/convert_jasper.py, and computes log-probs for a random model input with an
independent float64 torch implementation of the README's description (unfolded batch norm,
masked depthwise and pointwise convs). Not DLE's code: it checks hark's separable path against
the same written description the Jasper goldens confirmed for the dense path.
Usage: quartznet_ref.py OUT_DIR. Writes OUT/{masked,nomask}/{m/, log_probs.npy, meta.json} and
OUT/input.npy. Exit 0 = written."""
import json, os, subprocess, sys

import numpy as np
import torch
import torch.nn.functional as F

out = sys.argv[1]
torch.manual_seed(3)
LABELS = [" "] + [chr(ord("a") + i) for i in range(26)] + ["'"]
V = len(LABELS) + 1

BLOCKS = [  # filters, repeat, kernel, stride, dilation, residual, separable, kernel_size_factor
    (32, 1, 33, 2, 1, False, True, 1.0),
    (32, 3, 15, 1, 1, True, True, 1.0),
    (32, 3, 15, 1, 1, True, True, 1.0),
    (48, 3, 21, 1, 1, True, True, 0.5),  # 10.5 -> 10 -> odd 11
    (48, 1, 29, 1, 2, False, True, 1.0),
    (64, 1, 1, 1, 1, False, False, 1.0),
]


def yaml_text(masks):
    lines = ['name: "QuartzNet"', "labels: " + json.dumps(LABELS), "input_val:",
             "  audio_dataset:", "    sample_rate: 16000", "  filterbank_features:",
             "    normalize: per_feature", "    sample_rate: 16000", "    window_size: 0.02",
             "    window_stride: 0.01", "    window: hann", "    n_filt: 64", "    n_fft: 512",
             "    frame_splicing: 1", "    dither: 0.00001", "    pad_align: 16",
             "quartznet:", "  encoder:", "    init: xavier_uniform", "    in_feats: 64",
             "    frame_splicing: 1", "    activation: relu",
             f"    use_conv_masks: {'true' if masks else 'false'}", "    blocks:"]
    for f, r, k, s, d, res, sep, kf in BLOCKS:
        lines += [f"    - filters: {f}", f"      repeat: {r}", f"      kernel_size: [{k}]",
                  f"      stride: [{s}]", f"      dilation: [{d}]", "      dropout: 0.0",
                  f"      residual: {'true' if res else 'false'}",
                  f"      separable: {'true' if sep else 'false'}"]
        if kf != 1.0:
            lines.append(f"      kernel_size_factor: {kf}")
    lines += ["  decoder:", "    in_feats: 64", "    init: xavier_uniform"]
    return "\n".join(lines) + "\n"


def ksize(k, kf):
    n = max(int(k * kf), 1)
    return n + 1 if n % 2 == 0 else n


def bn_params(c, damp=1.0):
    return {"weight": (torch.rand(c) * 0.4 + 0.8) * damp, "bias": torch.randn(c) * 0.1,
            "running_mean": torch.randn(c) * 0.1, "running_var": torch.rand(c) + 0.5,
            "num_batches_tracked": torch.tensor(7)}


sd = {}
cin = 64
for i, (f, r, k, s, d, res, sep, kf) in enumerate(BLOCKS):
    k = ksize(k, kf)
    step = 5 if sep else 4
    for j in range(r):
        ci = cin if j == 0 else f
        base = f"encoder.layers.{i}.mconv"
        last = j == r - 1 and res
        if sep:
            sd[f"{base}.{step * j}.weight"] = torch.randn(ci, 1, k) / k ** 0.5
            sd[f"{base}.{step * j + 1}.weight"] = torch.randn(f, ci, 1) / ci ** 0.5
            bn = f"{base}.{step * j + 2}"
        else:
            sd[f"{base}.{step * j}.weight"] = torch.randn(f, ci, k) / (ci * k) ** 0.5
            bn = f"{base}.{step * j + 1}"
        for nm, t in bn_params(f, 0.5 if last else 1.0).items():
            sd[f"{bn}.{nm}"] = t
    if res:
        sd[f"encoder.layers.{i}.res.0.0.weight"] = torch.randn(f, cin, 1) / cin ** 0.5
        for nm, t in bn_params(f).items():
            sd[f"encoder.layers.{i}.res.0.1.{nm}"] = t
    cin = f
sd["decoder.layers.0.weight"] = torch.randn(V, cin, 1) * 3 / cin ** 0.5
sd["decoder.layers.0.bias"] = torch.randn(V) * 0.5

# a model input: T_in frames, the first L_in valid, garbage after them (masked convs drop it)
T_in, L_in = 160, 131
x = torch.randn(64, T_in)
np.save(os.path.join(out, "input.npy"), x.t().contiguous().numpy().astype("<f4"))


def newlen(n, k, s, d):
    return (n + 2 * (k // 2) * d - d * (k - 1) - 1) // s + 1


def mask(t, n, on):
    if on:
        t = t.clone()
        t[:, n:] = 0
    return t


def bn(t, p):
    g = {k: sd[f"{p}.{k}"].double() for k in ("weight", "bias", "running_mean", "running_var")}
    return ((t - g["running_mean"][:, None]) / torch.sqrt(g["running_var"][:, None] + 1e-3) *
            g["weight"][:, None] + g["bias"][:, None])


def conv(t, w, s=1, d=1, groups=1):
    k = w.shape[-1]
    return F.conv1d(t[None], w.double(), stride=s, padding=(k // 2) * d, dilation=d,
                    groups=groups)[0]


def forward(masks):
    xs, n = [x.double()], L_in
    for i, (f, r, k, s, d, res, sep, kf) in enumerate(BLOCKS):
        k = ksize(k, kf)
        step = 5 if sep else 4
        o, m = xs[-1], n
        for j in range(r):
            base = f"encoder.layers.{i}.mconv"
            if sep:
                o = conv(mask(o, m, masks), sd[f"{base}.{step * j}.weight"], s, d, o.shape[0])
                m = newlen(m, k, s, d)
                o = conv(mask(o, m, masks), sd[f"{base}.{step * j + 1}.weight"])
                o = bn(o, f"{base}.{step * j + 2}")
            else:
                o = conv(mask(o, m, masks), sd[f"{base}.{step * j}.weight"], s, d)
                m = newlen(m, k, s, d)
                o = bn(o, f"{base}.{step * j + 1}")
            if j < r - 1:
                o = torch.relu(o)
        if res:
            o = o + bn(conv(mask(xs[0], n, masks), sd[f"encoder.layers.{i}.res.0.0.weight"]),
                       f"encoder.layers.{i}.res.0.1")
        xs, n = [torch.relu(o)], m
    logits = conv(xs[-1], sd["decoder.layers.0.weight"]) + sd["decoder.layers.0.bias"].double()[:, None]
    return torch.log_softmax(logits.t(), dim=1), n


for masks in (True, False):
    d = os.path.join(out, "masked" if masks else "nomask")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.yaml"), "w") as fh:
        fh.write(yaml_text(masks))
    torch.save({"epoch": 1, "state_dict": sd}, os.path.join(d, "ckpt.pt"))
    r = subprocess.run([sys.executable, "tools/convert_jasper.py", "--checkpoint",
                        os.path.join(d, "ckpt.pt"), "--config", os.path.join(d, "model.yaml"),
                        "--output", os.path.join(d, "m")], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("convert_jasper.py: " + r.stdout + r.stderr)
    lp, n_out = forward(masks)
    np.save(os.path.join(d, "log_probs.npy"), lp.numpy())
    json.dump({"len_in": L_in, "len_out": n_out}, open(os.path.join(d, "meta.json"), "w"))
