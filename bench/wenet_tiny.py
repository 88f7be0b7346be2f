"""A tiny WeNet-shaped checkpoint for server benchmarks on a CPU: one Conformer block (d=32, 2 heads,
FFN 64), CTC over 5002 units (--vocab), no attention decoder, seeded random weights.
Recognizing 5 s takes a few milliseconds on one core, so `hark serve` measurements show the
server, not the encoder. Needs only /usr/bin/python3 with python3-torch and python3-yaml (not
WeNet's sources): the tensor names and shapes come from tools/convert_wenet.py itself.

  /usr/bin/python3 bench/wenet_tiny.py --out DIR [--vocab 5002]   # DIR/final.pt, train.yaml,
                                                                   # units.txt for convert_wenet.py
Used by bench/serve_bench.sh on the CPU."""
import argparse, importlib.util, os, sys

import torch
import yaml

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--vocab", type=int, default=5002, help="output units (5002: LibriSpeech's)")
a = ap.parse_args()

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("convert_wenet",
                                              os.path.join(here, "..", "tools", "convert_wenet.py"))
cw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cw)

V = a.vocab
ENC = dict(output_size=32, attention_heads=2, linear_units=64, num_blocks=1, dropout_rate=0.1,
           positional_dropout_rate=0.1, attention_dropout_rate=0.1, input_layer="conv2d",
           normalize_before=True, cnn_module_kernel=15, use_cnn_module=True, activation_type="swish",
           pos_enc_layer_type="rel_pos", selfattention_layer_type="rel_selfattn", causal=True,
           use_dynamic_chunk=True, cnn_module_norm="layer_norm", use_dynamic_left_chunk=False)
y = {"input_dim": 80, "output_dim": V, "encoder": "conformer", "encoder_conf": ENC,
     "decoder": None, "ctc": "ctc", "model": "asr_model",
     "model_conf": {"ctc_weight": 1.0, "reverse_weight": 0.0},
     "dataset_conf": {"feats_type": "fbank",
                      "fbank_conf": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25}}}
cfg = cw.parse_config(y)
cfg["frontend"]["cmvn"] = False  # no global_cmvn in this checkpoint
gen = torch.Generator().manual_seed(20261123)
sd = {}
for name, shape in cw.expected_tensors(cfg).items():
    if len(shape) == 1 and "norm" in name and name.endswith(".weight"):
        sd[name] = torch.ones(shape)
    elif len(shape) > 1:
        fan_in = 1
        for s in shape[1:]:
            fan_in *= s
        sd[name] = torch.randn(shape, generator=gen) * fan_in ** -0.5
    else:
        sd[name] = torch.randn(shape, generator=gen) * 0.02
os.makedirs(a.out, exist_ok=True)
torch.save(sd, os.path.join(a.out, "final.pt"))
with open(os.path.join(a.out, "train.yaml"), "w") as f:
    yaml.safe_dump(y, f)
with open(os.path.join(a.out, "units.txt"), "w") as f:
    for i in range(V):
        tok = "<blank>" if i == 0 else "<unk>" if i == 1 else "<sos/eos>" if i == V - 1 else f"\u2581t{i}"
        f.write(f"{tok} {i}\n")
print(f"wrote {a.out}: {sum(t.numel() for t in sd.values())} parameters", file=sys.stderr)
