"""pyneed.py — imported first by every runnable tool in tools/: when a Python module the tool
needs (numpy, torch, yaml, ...) is missing from the interpreter running it — typically a python3
from a virtualenv or conda first on PATH instead of Debian's — the tool ends with a message that
names the interpreter to use, not a ModuleNotFoundError traceback.
Tests: tests/tools/test_tools.c (tools_python_missing_module_message)."""
import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"
# module -> Debian package (tools/install-deps.sh --dev installs them all)
PACKAGES = {
    "numpy": "python3-numpy",
    "torch": "python3-torch",
    "torchaudio": "python3-torchaudio",
    "yaml": "python3-yaml",
    "unidecode": "python3-unidecode",
    "inflect": "python3-inflect",
    "requests": "python3-requests",
}


def message(name, tool, executable):
    top = (name or "").split(".")[0]
    if top == "wenet":
        return (f"{tool}: WeNet's `wenet` package is not importable: it is fetched into .ext/, "
                f"never committed (bench/conformer.sh prints how to fill .ext/)")
    pkg = PACKAGES.get(top, f"the package providing '{top}'")
    if os.path.realpath(executable) != os.path.realpath(DEBIAN_PYTHON):
        return (f"{tool}: Python module '{top}' is missing from {executable}.\n"
                f"  hark's tools run with Debian's {DEBIAN_PYTHON} and its packages ({pkg}):\n"
                f"    {DEBIAN_PYTHON} {sys.argv[0]} ...\n"
                f"  (tools/install-deps.sh --dev installs them)")
    return (f"{tool}: Python module '{top}' is missing: install {pkg} "
            f"(tools/install-deps.sh --dev installs every package the tools use)")


def _hook(kind, value, tb):
    if issubclass(kind, ModuleNotFoundError):
        tool = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "tool"
        print(message(value.name, tool, sys.executable), file=sys.stderr)
        return
    sys.__excepthook__(kind, value, tb)


sys.excepthook = _hook
