#!/usr/bin/env bash
# Feature benchmark: hark (bench/bench_features.c) next to PyTorch/torchaudio
# (bench/bench_features_torch.py) on the same machine in the same run, with ratios.
# Usage: bench/features.sh [--cpu-only|--gpu-only]   (run from the repository root)
set -euo pipefail
PY=${PYTHON:-python3}
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null && PY=${PYTHON:-/usr/bin/python3}
BIN=${HARK_BENCH:-build/bench/bench_features}
out=$(mktemp -d)
"$BIN" "$@" > "$out/hark.jsonl"
$PY bench/bench_features_torch.py --json "$@" > "$out/torch.jsonl" || echo "torch side failed" >&2
$PY - "$out/hark.jsonl" "$out/torch.jsonl" <<'PYEOF'
import json, sys
hark = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
torch = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
def base(k): return k.split(" (")[0]
print(f"{'device':6} {'kind':20} {'batch':>5} {'hark ms':>10} {'hark RTFx':>12} {'torch ms':>10} {'torch RTFx':>12} {'speed-up':>9}")
for h in hark:
    peers = [t for t in torch if t["device"] == h["device"] and base(t["kind"]) == h["kind"]]
    best = min(peers, key=lambda t: t["median_ms"] / t["batch"]) if peers else None
    tm = f"{best['median_ms']:10.3f}" if best else f"{'-':>10}"
    tr = f"{best['rtfx']:12.0f}" if best else f"{'-':>12}"
    sp = f"{best['median_ms'] / best['batch'] / (h['median_ms'] / h['batch']):8.1f}x" if best else f"{'-':>9}"
    print(f"{h['device']:6} {h['kind']:20} {h['batch']:5d} {h['median_ms']:10.3f} {h['rtfx']:12.0f} {tm} {tr} {sp}"
          + (f"   (torch: {best['kind']})" if best and best['kind'] != h['kind'] else ""))
PYEOF
echo "raw results: $out"
