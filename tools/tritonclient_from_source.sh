#!/usr/bin/env bash
# tritonclient_from_source.sh — builds an importable `tritonclient` package tree (HTTP and gRPC)
# from the sources of triton-inference-server/client and triton-inference-server/common, for
# machines where `pip install tritonclient` is not possible (docs/serving.md, "DLE's
# jasper-client.py against hark"). Tests: tests/server/test_jasper_client.c (builds one into a
# temporary folder each run).
#
#   tools/tritonclient_from_source.sh --client CLIENT --common COMMON --output DIR [--python PY]
#
# CLIENT: a tree of triton-inference-server/client (its root or src/python/library); COMMON: a
# tree of triton-inference-server/common (its root or protobuf/). DIR (replaced) receives
# DIR/tritonclient/, laid out as the official wheel (src/python/library/build_wheel.py): the
# library's Python files as they are, and in tritonclient/grpc/ the stubs generated from COMMON's
# protos with PY -m grpc_tools.protoc — model_config_pb2.py, service_pb2.py (from
# grpc_service.proto) and service_pb2_grpc.py — whose top-level protoc imports are rewritten to
# `from tritonclient.grpc import ...` exactly as build_wheel.py's sed does. Nothing of the
# library's own code is changed. Then `PYTHONPATH=DIR PY -c 'import tritonclient.grpc,
# tritonclient.http'` is checked.
#
# PY (default /usr/bin/python3) needs grpc_tools to build; using the result needs numpy, grpcio,
# protobuf, packaging, python-rapidjson, gevent and geventhttpclient (on Debian 12:
# python3-grpc-tools python3-grpcio python3-protobuf python3-packaging python3-rapidjson
# python3-geventhttpclient; tools/install-deps.sh --dev installs them). An existing DIR is
# replaced only when it is empty or this script made it.
set -euo pipefail

usage() {
    sed -n '8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
die() {
    echo "tritonclient_from_source.sh: $*" >&2
    exit 1
}

client="" common="" out="" py=/usr/bin/python3
while [ $# -gt 0 ]; do
    case "$1" in
    --client) client=${2:-}; shift 2 || usage ;;
    --common) common=${2:-}; shift 2 || usage ;;
    --output) out=${2:-}; shift 2 || usage ;;
    --python) py=${2:-}; shift 2 || usage ;;
    -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tritonclient_from_source.sh: unknown option '$1'" >&2; usage ;;
    esac
done
[ -n "$client" ] && [ -n "$common" ] && [ -n "$out" ] || usage

lib=""
for d in "$client/src/python/library" "$client"; do
    [ -f "$d/tritonclient/__init__.py" ] && { lib=$d; break; }
done
[ -n "$lib" ] ||
    die "$client holds no src/python/library/tritonclient (a triton-inference-server/client tree)"
protos=""
for d in "$common/protobuf" "$common"; do
    [ -f "$d/grpc_service.proto" ] && [ -f "$d/model_config.proto" ] && { protos=$d; break; }
done
[ -n "$protos" ] ||
    die "$common holds no protobuf/grpc_service.proto (a triton-inference-server/common tree)"
"$py" -c 'import grpc_tools.protoc' 2>/dev/null ||
    die "$py lacks grpc_tools (Debian: apt-get install python3-grpc-tools)"

mark=.tritonclient_from_source
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ] && [ ! -f "$out/$mark" ]; then
    die "$out exists and was not made by this script: not replacing it"
fi
rm -rf "$out"
mkdir -p "$out"
: >"$out/$mark"
# the library as the wheel has it: every file of tritonclient/ but the CMake lists
cp -R "$lib/tritonclient" "$out/tritonclient"
find "$out/tritonclient" -name CMakeLists.txt -delete
find "$out/tritonclient" -name __pycache__ -prune -exec rm -rf {} +

gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
"$py" -m grpc_tools.protoc -I "$protos" --python_out="$gen" --grpc_python_out="$gen" \
    grpc_service.proto model_config.proto || die "grpc_tools.protoc failed on $protos"
g="$out/tritonclient/grpc"
# build_wheel.py: model_config_pb2.py and grpc_service_pb2.py's `import X_pb2 as Y` and
# grpc_service_pb2_grpc.py's `import grpc_X_pb2 as Y` become `from tritonclient.grpc import ...`
sed -E 's/^import ([^ ]*)_pb2 as ([^ ]*)$/from tritonclient.grpc import \1_pb2 as \2/' \
    "$gen/model_config_pb2.py" >"$g/model_config_pb2.py"
sed -E 's/^import ([^ ]*)_pb2 as ([^ ]*)$/from tritonclient.grpc import \1_pb2 as \2/' \
    "$gen/grpc_service_pb2.py" >"$g/service_pb2.py"
sed -E 's/^import grpc_([^ ]*)_pb2 as ([^ ]*)$/from tritonclient.grpc import \1_pb2 as \2/' \
    "$gen/grpc_service_pb2_grpc.py" >"$g/service_pb2_grpc.py"

abs=$(cd "$out" && pwd)
if ! err=$(cd / && PYTHONPATH="$abs" "$py" -c \
    'import tritonclient.grpc, tritonclient.http, tritonclient.grpc.model_config_pb2' 2>&1); then
    echo "$err" >&2
    die "the built tree does not import with $py (a dependency missing? see --help)"
fi
echo "tritonclient built in $out (from $lib and $protos): PYTHONPATH=$out"
