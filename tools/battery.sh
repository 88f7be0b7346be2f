#!/usr/bin/env bash
# The reliability battery of issue 23 at full size, for humans: tests/server/test_battery.py
# --full against `hark serve` with copies of the bundled demo recognizer (models/demo-en-asr, on
# the CPU): malformed request lines, 1 MB headers, slowloris, 50 MB pipelined without reading
# (server RSS bounded), resets mid-body, 1,000 idle connections, keep-alive storms, lying
# Content-Length and binary tensor sizes, NaN/Inf, empty and oversized audio, corrupt
# WAV/FLAC/MP3 headers, bad model repositories, 100 load/unload cycles under traffic, overload
# beyond the queue (503 + Retry-After), SIGTERM with 50 requests in flight (all answered, exit 0)
# and a 10-minute soak (RSS flat, outputs identical to the reference run). About 15 minutes.
# `make test` runs the same battery at a small size (tests/server/test_battery.c).
# Usage: tools/battery.sh [HARK_BIN] [--only SECTION,...]   (from anywhere; HARK_BIN: build/hark)
# Prints one ok / FAIL line per check and the count; exit status 0 when all passed.
set -euo pipefail
cd "$(dirname "$0")/.."
HARK=build/hark
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
    HARK=$1
    shift
fi
[ -x "$HARK" ] || { echo "no $HARK: run make first" >&2; exit 2; }
# Debian's python3 has python3-requests (tools/install-deps.sh); another python3 first on PATH
# may not
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
"$PY" -c 'import requests' 2>/dev/null || {
    echo "$PY lacks the requests module (apt-get install python3-requests)" >&2
    exit 2
}
ulimit -n 4096 2>/dev/null || true # 1,000 idle connections on each side
echo "battery: $HARK, full size, started $(date '+%H:%M:%S')"
exec "$PY" tests/server/test_battery.py "$HARK" --full "$@"
