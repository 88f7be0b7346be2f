#!/usr/bin/env python3
"""Convert Silero VAD's ONNX file (snakers4/silero-vad v5/v6, `silero_vad.onnx`) into a hark
model directory.

    DIR/config.pbtxt          Triton-style model config (backend "hark", family "silero_vad")
    DIR/1/model.safetensors   both branches' weights as float32: `sr16000.<name>` and
                              `sr8000.<name>`, <name> the original PyTorch name
                              (stft.forward_basis_buffer, encoder.N.reparam_conv.weight, ...)
    DIR/1/model.json          per sample rate: STFT size, hop and reflect padding, window and
                              context samples, the encoder's convolutions, the LSTM width

The ONNX file holds one `If` on `sr == 16000` whose two branches are the 16 kHz and 8 kHz
networks: reflect pad -> STFT as a strided conv -> magnitude -> 4 x (conv k3 + ReLU) -> LSTM
cell (state (2, batch, 128) carried between windows) -> ReLU -> 1x1 conv -> sigmoid -> mean.
The converter reads the protobuf itself (no onnx package needed), checks that every node and
attribute the engine relies on is what it implements, and refuses anything else by name.
silero-vad's `silero_vad_16k.safetensors` (its tinygrad port) is not a source: its weights are
not those of `silero_vad.onnx` (every layer but the STFT basis differs). Needs python3-numpy.
Tests: tests/model/silero/test_silero_vad.c (converted once per version, like the goldens).
"""
import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyneed  # noqa: E402,F401 (a missing module names the python3 to use)

import numpy as np

from hark_entry import ConvertError, entry_name, fail, write_entry

FAMILY = "silero_vad"
MODEL_JSON_VERSION = 1
CONVERTER_VERSION = "1"

# What silero-vad's OnnxWrapper feeds the model per call: `window` new samples after `context`
# samples kept from the previous call (zeros for the first). Not stored in the ONNX file.
FEED = {16000: (512, 64), 8000: (256, 32)}
HIDDEN = 128
# the encoder (encoder.N.reparam_conv): stride of each k=3, pad=1 conv, ReLU after each
ENC_STRIDES = (1, 2, 2, 1)


# ---- a minimal reader of the ONNX protobuf (only the fields used here) -----------------------

def _varint(b, i):
    v = s = 0
    while True:
        if i >= len(b):
            fail("truncated protobuf (varint)")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def _fields(b):
    i, n = 0, len(b)
    while i < n:
        key, i = _varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = _varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 2:
            ln, i = _varint(b, i)
            v, i = b[i:i + ln], i + ln
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        else:
            fail(f"protobuf wire type {w} is not supported")
        if i > n:
            fail("truncated protobuf")
        yield f, w, v


def _ints(w, v):
    """int64 field values (one varint, or a packed run)."""
    vals = [v] if w == 0 else []
    if w == 2:
        i = 0
        while i < len(v):
            x, i = _varint(v, i)
            vals.append(x)
    return [x - (1 << 64) if x >= 1 << 63 else x for x in vals]


_DTYPES = {1: "<f4", 6: "<i4", 7: "<i8", 9: "?", 11: "<f8"}


def _tensor(b):
    dims, dt, name, raw, fl, i64, i32 = [], 0, "", None, [], [], []
    for f, w, v in _fields(b):
        if f == 1:
            dims += _ints(w, v)
        elif f == 2:
            dt = v
        elif f == 8:
            name = v.decode()
        elif f == 9:
            raw = v
        elif f == 4:
            fl += list(struct.unpack(f"<{len(v) // 4}f", v)) if w == 2 else \
                [struct.unpack("<f", v)[0]]
        elif f == 7:
            i64 += _ints(w, v)
        elif f == 5:
            i32 += _ints(w, v)
        elif f in (13, 14):
            fail(f"tensor {name or '?'}: external data is not supported")
    if dt not in _DTYPES:
        fail(f"tensor {name or '?'}: ONNX data type {dt} is not supported")
    if raw is not None:
        a = np.frombuffer(raw, dtype=_DTYPES[dt]).copy()
    else:
        a = np.array(fl if dt in (1, 11) else (i64 if dt == 7 else i32), dtype=_DTYPES[dt])
    n = int(np.prod(dims)) if dims else 1
    if a.size != n:
        fail(f"tensor {name or '?'}: {a.size} values for shape {dims}")
    return a.reshape(dims)


def _attr(b):
    a = {}
    for f, w, v in _fields(b):
        if f == 1:
            a["name"] = v.decode()
        elif f == 2:
            a["f"] = struct.unpack("<f", v)[0]
        elif f == 3:
            a["i"] = _ints(0, v)[0]
        elif f == 4:
            a["s"] = v.decode(errors="replace")
        elif f == 5:
            a["t"] = _tensor(v)
        elif f == 6:
            a["g"] = _graph(v)
        elif f == 8:
            a.setdefault("ints", []).extend(_ints(w, v))
    return a


def _node(b):
    n = {"input": [], "output": [], "name": "", "op": "", "attrs": {}}
    for f, w, v in _fields(b):
        if f == 1:
            n["input"].append(v.decode())
        elif f == 2:
            n["output"].append(v.decode())
        elif f == 3:
            n["name"] = v.decode()
        elif f == 4:
            n["op"] = v.decode()
        elif f == 5:
            a = _attr(v)
            n["attrs"][a.get("name", "")] = a
    return n


def _graph(b):
    g = {"nodes": [], "inits": {}, "inputs": []}
    for f, w, v in _fields(b):
        if f == 1:
            g["nodes"].append(_node(v))
        elif f == 5:
            t = _tensor(v)
            g["inits"][len(g["inits"])] = t
        elif f == 11:
            g["inputs"].append([x.decode() for ff, _, x in _fields(v) if ff == 1][0])
    return g


def read_onnx(path):
    try:
        with open(path, "rb") as f:
            b = f.read()
    except OSError as ex:
        fail(f"{path}: {ex}")
    for f, w, v in _fields(b):
        if f == 7 and w == 2:
            return _graph(v)
    fail(f"{path}: no graph (not an ONNX model?)")


# ---- the two branches --------------------------------------------------------------------------

def _constants(g):
    """Constant nodes of a branch: short name (the prefix ONNX's If inlining adds removed) ->
    array. The weights keep their PyTorch names (`encoder.0.reparam_conv.weight`)."""
    out = {}
    for n in g["nodes"]:
        if n["op"] == "Constant" and "value" in n["attrs"] and "t" in n["attrs"]["value"]:
            name = n["output"][0]
            short = name.split("__Inline_0__", 1)[-1]
            out[short] = n["attrs"]["value"]["t"]
    return out


def _nodes_named(g, suffix):
    return [n for n in g["nodes"] if n["name"].split("__Inline_0__", 1)[-1] == suffix]


def _one(g, suffix, op, where):
    ns = _nodes_named(g, suffix)
    if len(ns) != 1 or ns[0]["op"] != op:
        fail(f"{where}: expected one {op} node {suffix} (silero-vad v5/v6 graph)")
    return ns[0]


def _ints_attr(n, key, where):
    a = n["attrs"].get(key)
    if a is None or "ints" not in a:
        fail(f"{where}: node {n['name']} lacks attribute {key}")
    return a["ints"]


def _int_attr(n, key, default):
    a = n["attrs"].get(key)
    return default if a is None else a.get("i", default)


def parse_branch(g, rate):
    where = f"{rate} Hz branch"
    c = _constants(g)
    window, context = FEED[rate]

    def weight(name, shape=None):
        if name not in c:
            fail(f"{where}: constant {name} is missing")
        a = np.ascontiguousarray(c[name].astype("<f4"))
        if shape is not None and tuple(a.shape) != tuple(shape):
            fail(f"{where}: {name}: expected shape {list(shape)}, the file has {list(a.shape)}")
        if not np.all(np.isfinite(a)):
            fail(f"{where}: {name}: holds NaN or infinite values")
        return a

    # front end: Pad(reflect, right by `pad`) -> Conv(basis, stride hop) -> |.| of the halves
    pad_node = _one(g, "/stft/padding/Pad", "Pad", where)
    if pad_node["attrs"].get("mode", {}).get("s") != "reflect":
        fail(f"{where}: /stft/padding/Pad: mode must be reflect")
    pads = c.get("/stft/padding/Constant_1_output_0")
    if pads is None or pads.shape != (2,) or int(pads[0]) != 0 or int(pads[1]) <= 0:
        fail(f"{where}: the STFT padding is not (0, P) (a right-only reflect pad)")
    pad = int(pads[1])
    conv = _one(g, "/stft/Conv", "Conv", where)
    n_fft = _ints_attr(conv, "kernel_shape", where)[0]
    hop = _ints_attr(conv, "strides", where)[0]
    if _ints_attr(conv, "pads", where) != [0, 0] or _int_attr(conv, "group", 1) != 1 or \
            _ints_attr(conv, "dilations", where) != [1]:
        fail(f"{where}: /stft/Conv: only pads 0, group 1, dilation 1 are supported")
    n_bins = n_fft // 2 + 1
    cut = c.get("/stft/Constant_8_output_0")
    if cut is None or cut.tolist() != [n_bins]:
        fail(f"{where}: the magnitude does not split the STFT at n_fft / 2 + 1 = {n_bins}")
    basis = weight("stft.forward_basis_buffer", (2 * n_bins, 1, n_fft))
    frames = (context + window + pad - n_fft) // hop + 1
    if (context + window + pad - n_fft) % hop or frames < 1:
        fail(f"{where}: {context} + {window} + {pad} samples do not give whole STFT frames")

    tensors = {"stft.forward_basis_buffer": basis}
    convs = []
    cin, t = n_bins, frames
    for i, stride in enumerate(ENC_STRIDES):
        node = _one(g, f"/encoder/{i}/reparam_conv/Conv", "Conv", where)
        if _ints_attr(node, "kernel_shape", where) != [3] or \
                _ints_attr(node, "pads", where) != [1, 1] or \
                _ints_attr(node, "strides", where) != [stride] or \
                _int_attr(node, "group", 1) != 1 or _ints_attr(node, "dilations", where) != [1]:
            fail(f"{where}: encoder.{i}: expected kernel 3, pads 1, stride {stride}, group 1")
        _one(g, f"/encoder/{i}/activation/Relu", "Relu", where)
        w = weight(f"encoder.{i}.reparam_conv.weight")
        if w.ndim != 3 or w.shape[1] != cin or w.shape[2] != 3:
            fail(f"{where}: encoder.{i}.reparam_conv.weight: expected shape [*, {cin}, 3], the "
                 f"file has {list(w.shape)}")
        cout = w.shape[0]
        tensors[f"encoder.{i}.reparam_conv.weight"] = w
        tensors[f"encoder.{i}.reparam_conv.bias"] = weight(f"encoder.{i}.reparam_conv.bias",
                                                           (cout,))
        t = (t + 2 - 3) // stride + 1
        convs.append({"cin": cin, "cout": cout, "kernel": 3, "stride": stride, "pad": 1})
        cin = cout
    if t != 1 or cin != HIDDEN:
        fail(f"{where}: the encoder ends with {cin} channels x {t} frames, not {HIDDEN} x 1")

    lstms = [n for n in _all_nodes(g) if n["op"] == "LSTM"]
    if not lstms:
        fail(f"{where}: no LSTM node")
    for n in lstms:
        if _int_attr(n, "hidden_size", 0) != HIDDEN or "activations" in n["attrs"] or \
                _int_attr(n, "input_forget", 0) != 0 or "clip" in n["attrs"] or \
                n["attrs"].get("direction", {}).get("s", "forward") != "forward":
            fail(f"{where}: LSTM: only a forward LSTM of hidden size {HIDDEN} with the default "
                 "activations is supported")
    for name, shape in (("decoder.rnn.weight_ih", (4 * HIDDEN, HIDDEN)),
                        ("decoder.rnn.weight_hh", (4 * HIDDEN, HIDDEN)),
                        ("decoder.rnn.bias_ih", (4 * HIDDEN,)),
                        ("decoder.rnn.bias_hh", (4 * HIDDEN,)),
                        ("decoder.decoder.2.weight", (1, HIDDEN, 1)),
                        ("decoder.decoder.2.bias", (1,))):
        tensors[name] = weight(name, shape)
    _one(g, "/decoder/decoder/1/Relu", "Relu", where)
    _one(g, "/decoder/decoder/3/Sigmoid", "Sigmoid", where)
    _one(g, "/ReduceMean", "ReduceMean", where)

    cfg = {"sample_rate": rate, "window": window, "context": context, "n_fft": n_fft,
           "hop": hop, "pad": pad, "frames": frames, "encoder": convs}
    return cfg, tensors


def _all_nodes(g):
    out = []
    for n in g["nodes"]:
        out.append(n)
        for a in n["attrs"].values():
            if "g" in a:
                out += _all_nodes(a["g"])
    return out


def split_branches(g):
    """The top-level If on Equal(sr, R): then = rate R, else = the other rate."""
    consts = {n["output"][0]: n["attrs"]["value"]["t"] for n in g["nodes"]
              if n["op"] == "Constant" and "t" in n["attrs"].get("value", {})}
    eq = {n["output"][0]: n for n in g["nodes"] if n["op"] == "Equal"}
    ifs = [n for n in g["nodes"] if n["op"] == "If"]
    if len(ifs) != 1 or ifs[0]["input"][0] not in eq:
        fail("expected one top-level If on `sr == rate` (silero-vad v5/v6 with both rates)")
    e = eq[ifs[0]["input"][0]]
    if "sr" not in e["input"] or not any(x in consts for x in e["input"]):
        fail("the top-level If does not test the `sr` input against a constant")
    rate = int([consts[x] for x in e["input"] if x in consts][0])
    other = {16000: 8000, 8000: 16000}.get(rate)
    if other is None:
        fail(f"the If tests sr == {rate}; hark knows 16000 and 8000")
    return {rate: ifs[0]["attrs"]["then_branch"]["g"],
            other: ifs[0]["attrs"]["else_branch"]["g"]}


# ---- writers -----------------------------------------------------------------------------------

def config_pbtxt(name, max_batch):
    out = [f'name: "{name}"', 'backend: "hark"', f"max_batch_size: {max_batch}",
           "input [", "  {", '    name: "WAV"', "    data_type: TYPE_FP32", "    dims: [ -1 ]",
           "  },", "  {", '    name: "WAV_LENS"', "    data_type: TYPE_INT32", "    dims: [ 1 ]",
           "  }", "]",
           # start and end ms of each speech segment; shorter rows padded with -1
           "output [", "  {", '    name: "SEGMENTS"', "    data_type: TYPE_INT32",
           "    dims: [ -1, 2 ]", "  }", "]",
           "dynamic_batching { }",
           "instance_group [", "  {", "    count: 1", "    kind: KIND_CPU", "  }", "]",
           f'parameters {{ key: "family" value {{ string_value: "{FAMILY}" }} }}']
    return "\n".join(out) + "\n"


def convert(args):
    if not 1 <= args.max_batch_size <= 4096:
        fail(f"--max-batch-size {args.max_batch_size}: must be in [1, 4096]")
    g = read_onnx(args.onnx)
    branches = split_branches(g)
    rates, tensors = [], {}
    for rate in sorted(branches, reverse=True):
        cfg, ts = parse_branch(branches[rate], rate)
        rates.append(cfg)
        for k, a in ts.items():
            tensors[f"sr{rate}.{k}"] = a
    model_json = {"format_version": MODEL_JSON_VERSION, "family": FAMILY, "hidden": HIDDEN,
                  "rates": rates}
    name = entry_name(args.output, fail)
    meta = {"format": "hark", "family": FAMILY, "converter": "tools/convert_silero_vad.py",
            "converter_version": CONVERTER_VERSION, "source": os.path.basename(args.onnx)}
    out = write_entry(args.output, tensors, meta, model_json,
                      config_pbtxt(name, args.max_batch_size))
    n = sum(a.size for a in tensors.values())
    print(f"wrote {out}: silero vad, rates {[r['sample_rate'] for r in rates]}, {len(tensors)} "
          f"tensors, {n} values")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onnx", required=True, help="silero_vad.onnx (v5/v6, 16 and 8 kHz)")
    ap.add_argument("--output", required=True, help="model directory to write")
    ap.add_argument("--max-batch-size", type=int, default=256, help="config.pbtxt max_batch_size")
    args = ap.parse_args(argv)
    try:
        convert(args)
    except ConvertError as ex:
        print(f"convert_silero_vad: error: {ex}", file=sys.stderr)
        return 1
    except (UnicodeDecodeError, ValueError, KeyError, IndexError, TypeError,
            struct.error) as ex:  # a damaged file the checks above did not name
        print(f"convert_silero_vad: error: {args.onnx}: not a readable Silero VAD ONNX file "
              f"({type(ex).__name__}: {ex})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
