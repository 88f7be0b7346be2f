"""hark_entry.py — what every converter in tools/ does the same way: the weights as safetensors
and a model-repository entry (DIR/config.pbtxt, DIR/1/model.json, DIR/1/model.safetensors)
written next to DIR first and moved into place, so that a failed conversion leaves nothing
half-written; and the way a conversion fails (ConvertError: one line on stderr, exit status 1,
no traceback). Imported by every convert_*.py (convert_wenet.py takes its safetensors writer)."""

import json
import os
import re
import shutil
import struct
import sys
import tempfile

import numpy as np


class ConvertError(Exception):
    """a conversion that cannot go on; the message says why"""


def fail(msg):
    raise ConvertError(msg)


def run_convert(tool, convert, args):
    """convert(args); a ConvertError becomes "<tool>: error: <why>" on stderr and status 1"""
    try:
        convert(args)
    except ConvertError as ex:
        print(f"{tool}: error: {ex}", file=sys.stderr)
        return 1
    return 0


ST_DTYPES = {"float32": "F32", "float16": "F16"}


def write_safetensors(path, tensors, metadata):
    """safetensors: u64 LE header length, JSON header, tensor bytes (contiguous, in order);
    float32 arrays as F32, float16 ones as F16 (hark widens those to float32 when it loads)."""
    header = {"__metadata__": metadata}
    off = 0
    for name, a in tensors.items():
        header[name] = {"dtype": ST_DTYPES[a.dtype.name], "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for a in tensors.values():
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes(order="C"))


def read_safetensors(path):
    """write_safetensors' inverse: (name -> float32 array, metadata); F16 tensors are widened."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    kinds = {v: np.dtype(k).newbyteorder("<") for k, v in ST_DTYPES.items()}
    out = {}
    for name, h in header.items():
        if h["dtype"] not in kinds:
            raise ValueError(f"{path}: tensor {name} has dtype {h['dtype']} (F32 or F16 expected)")
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=kinds[h["dtype"]]).reshape(h["shape"]) \
            .astype(np.float32)
    return out, meta


def entry_name(output, fail):
    """The model name an --output directory gives (its last component), checked."""
    name = os.path.basename(os.path.abspath(os.path.normpath(output)))
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        fail(f"--output {output}: the model name {name!r} must use only A-Z a-z 0-9 _ . -")
    return name


def write_entry(output, tensors, meta, model_json, config_text, copies=None):
    """Writes the entry: tensors (name -> float32 array) with safetensors metadata meta, the
    model.json dict and the config.pbtxt text, and copies ({path in DIR: source file}, e.g.
    {"1/tokens.txt": "tokens.txt"}); an existing DIR keeps its other files."""
    out = os.path.normpath(output)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    name = os.path.basename(os.path.abspath(out))
    tmp = tempfile.mkdtemp(prefix=f".{name}.", dir=parent)
    os.chmod(tmp, 0o755)
    copies = copies or {}
    files = ("1/model.safetensors", "1/model.json", "config.pbtxt") + tuple(copies)
    try:
        os.makedirs(os.path.join(tmp, "1"))
        write_safetensors(os.path.join(tmp, "1", "model.safetensors"), tensors, meta)
        with open(os.path.join(tmp, "1", "model.json"), "w", encoding="utf-8") as f:
            json.dump(model_json, f, indent=2)
            f.write("\n")
        with open(os.path.join(tmp, "config.pbtxt"), "w", encoding="utf-8") as f:
            f.write(config_text)
        for rel, src in copies.items():
            shutil.copyfile(src, os.path.join(tmp, rel))
        if os.path.isdir(out):
            os.makedirs(os.path.join(out, "1"), exist_ok=True)
            for rel in files:
                os.replace(os.path.join(tmp, rel), os.path.join(out, rel))
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def tts_config_pbtxt(name, max_batch, family, vocoder=None):
    """config.pbtxt of a text-to-speech entry: the seed's Triton contract (DLE
    tacotron2waveglow) — INPUT text in, OUTPUT samples and OUTPUT_LENGTH out — on the CPU, with
    the vocoder it names (a model name in the repository, or a directory)"""
    out = [f'name: "{name}"', 'backend: "hark"', f"max_batch_size: {max_batch}",
           "input [", "  {", '    name: "INPUT"', "    data_type: TYPE_STRING",
           "    dims: [ -1 ]", "  }", "]",
           "output [", "  {", '    name: "OUTPUT"', "    data_type: TYPE_FP32",
           "    dims: [ -1 ]", "  },", "  {", '    name: "OUTPUT_LENGTH"',
           "    data_type: TYPE_INT32", "    dims: [ 1 ]", "  }", "]",
           "dynamic_batching { }",
           "instance_group [", "  {", "    count: 1", "    kind: KIND_CPU", "  }", "]",
           f'parameters {{ key: "family" value {{ string_value: "{family}" }} }}']
    if vocoder:
        out.append(f'parameters {{ key: "vocoder" value {{ string_value: "{vocoder}" }} }}')
    return "\n".join(out) + "\n"


def vocoder_config_pbtxt(name, max_batch, family, n_mels):
    """config.pbtxt of a vocoder entry: MEL [n_mels, frames] in, AUDIO out, on the CPU"""
    out = [f'name: "{name}"', 'backend: "hark"', f"max_batch_size: {max_batch}",
           "input [", "  {", '    name: "MEL"', "    data_type: TYPE_FP32",
           f"    dims: [ {n_mels}, -1 ]", "  }", "]",
           "output [", "  {", '    name: "AUDIO"', "    data_type: TYPE_FP32",
           "    dims: [ -1 ]", "  }", "]",
           "instance_group [", "  {", "    count: 1", "    kind: KIND_CPU", "  }", "]",
           f'parameters {{ key: "family" value {{ string_value: "{family}" }} }}']
    return "\n".join(out) + "\n"


def narrow_weights(tensors, dtype, fail):
    """--dtype float16: the matrices and kernels (2 or more dimensions) stored as float16, which
    halves the file; vectors (biases, norms, CMVN) stay float32. Refuses a weight float16 cannot
    hold (beyond +-65504) by name."""
    if dtype == "float32":
        return tensors
    if dtype != "float16":
        fail(f"--dtype {dtype}: float32 or float16")
    out = {}
    for name, a in tensors.items():
        if a.ndim >= 2:
            big = float(np.abs(a).max()) if a.size else 0.0
            if big > 65504.0:
                fail(f"tensor {name}: |value| {big:g} does not fit float16 (use --dtype float32)")
            a = a.astype(np.float16)
        out[name] = a
    return out


def sequence_batching(max_sequences):
    """config.pbtxt lines of Triton's sequence batcher as the streaming seeds configure it (WeNet's
    model_repo_stateful, sherpa's model_repo_streaming): sequences of chunks with the START /
    READY / CORRID / END controls, each bound to an instance, max_sequences open at once per
    instance."""
    preferred = sorted({max(1, max_sequences // 2), max_sequences})
    ctl = [("START", "CONTROL_SEQUENCE_START"), ("READY", "CONTROL_SEQUENCE_READY"),
           ("CORRID", "CONTROL_SEQUENCE_CORRID"), ("END", "CONTROL_SEQUENCE_END")]
    out = ["sequence_batching {", "  max_sequence_idle_microseconds: 5000000", "  oldest {",
           f"    max_candidate_sequences: {max_sequences}",
           f"    preferred_batch_size: [ {', '.join(map(str, preferred))} ]",
           "    max_queue_delay_microseconds: 2000", "  }", "  control_input ["]
    for i, (n, k) in enumerate(ctl):
        val = "data_type: TYPE_UINT64" if n == "CORRID" else "fp32_false_true: [ 0, 1 ]"
        out.append(f'    {{ name: "{n}" control [ {{ kind: {k} {val} }} ] }}'
                   + ("," if i < len(ctl) - 1 else ""))
    return out + ["  ]", "}"]
