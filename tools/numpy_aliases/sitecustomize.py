"""sitecustomize.py — puts back numpy's `np.bool` alias (the builtin `bool`, removed in numpy
1.24) for DLE's unmodified triton/jasper-client.py, whose speech_utils.py builds two dtype tables
with `np.bool` when it is imported (DLE's client image, tritonserver:20.10-py3-clientsdk, has an
older numpy). On PYTHONPATH it runs at interpreter start (docs/serving.md, "DLE's
jasper-client.py against hark"; tests/server/test_jasper_client.c). Nothing else is touched:
the alias is set only where numpy lacks it, to exactly what it was, and the next sitecustomize on
sys.path (Debian's) still runs."""
import importlib.util
import os
import sys

try:
    import numpy

    if "bool" not in vars(numpy):  # numpy >= 2 has np.bool again (the numpy scalar type)
        numpy.bool = bool
except ImportError:
    pass

_here = os.path.dirname(os.path.abspath(__file__))
for _d in sys.path:
    _p = os.path.join(_d or ".", "sitecustomize.py")
    if os.path.abspath(_d or ".") != _here and os.path.isfile(_p):
        _spec = importlib.util.spec_from_file_location("_next_sitecustomize", _p)
        _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
