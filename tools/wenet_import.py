"""wenet_import.py — makes WeNet's `wenet` package importable (fetched into .ext, never
committed) under a recent PyTorch: its folder and the stand-ins for packages WeNet imports but
hark's tools never call (--shims) go first on sys.path, and the names WeNet's squeezeformer
imports from an old torch.nn.modules.conv are supplied. Used by tools/train_demo.py and
bench/wenet_peer.py."""
import sys
import typing


def use_wenet(wenet_dir, shims_dir):
    sys.path[:0] = [shims_dir, wenet_dir]
    import torch
    import torch.nn.modules.conv as conv
    for name in ("Union", "Optional"):
        if not hasattr(conv, name):
            setattr(conv, name, getattr(typing, name))
    if not hasattr(conv, "Tensor"):
        conv.Tensor = torch.Tensor
