#!/usr/bin/env bash
# Installs hark's dependencies on Debian 12, as root or as a user with sudo (issue 23):
#   tools/install-deps.sh --runtime   the shared libraries a built hark runs with
#   tools/install-deps.sh --build     + compilers, headers and code generators: `make`
#   tools/install-deps.sh [--dev]     + what `make test`, `make lint`, `make format-check`, the
#                                     fuzz targets and tools/*.py use: Python with numpy, PyTorch
#                                     and gRPC, what tritonclient and DLE's jasper-client.py import
#                                     (tests/server/test_jasper_client.c), Chromium, clang,
#                                     cppcheck, clang-format (default)
#   --print                           lists the packages of the chosen set and installs nothing
# CUDA is optional and not installed here: when nvcc is on PATH or under /usr/local/cuda, `make`
# also builds the GPU code. Tests: tests/tools/test_tools.c (install_deps_*).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

RUNTIME=(libsndfile1 libsoxr0 libfftw3-single3 libsleef3 libopenblas0 libcjson1 libuv1
         libhttp-parser2.9 libnghttp2-14 libwslay1 libprotobuf-c1 zlib1g libcairo2)
BUILD=(build-essential pkg-config
       libsndfile1-dev libsoxr-dev libfftw3-dev libsleef-dev libopenblas-dev libcjson-dev
       libuv1-dev libhttp-parser-dev zlib1g-dev libcairo2-dev
       libnghttp2-dev libwslay-dev libprotobuf-c-dev protobuf-c-compiler)
DEV=(python3 python3-numpy python3-yaml python3-torch python3-torchaudio python3-requests python3-packaging
     python3-grpcio python3-grpc-tools python3-protobuf
     python3-soundfile python3-pyaudio python3-rapidjson python3-geventhttpclient
     python3-unidecode python3-inflect python3-websocket python3-selenium chromium chromium-driver
     clang libclang-rt-14-dev cppcheck clang-format curl)

usage() {
    echo "usage: tools/install-deps.sh [--runtime|--build|--dev] [--print]" >&2
    exit 2
}

set_name=dev
print=0
for a in "$@"; do
    case "$a" in
    --runtime) set_name=runtime ;;
    --build) set_name=build ;;
    --dev) set_name=dev ;;
    --print) print=1 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tools/install-deps.sh: unknown option '$a'" >&2; usage ;;
    esac
done

pkgs=("${RUNTIME[@]}")
[ "$set_name" = runtime ] || pkgs+=("${BUILD[@]}")
[ "$set_name" = dev ] && pkgs+=("${DEV[@]}")

if [ "$print" = 1 ]; then
    printf '%s\n' "${pkgs[@]}"
    exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "tools/install-deps.sh: not root and sudo is absent: run it as root" \
             "(su -c 'bash tools/install-deps.sh --$set_name')" >&2
        exit 1
    fi
    SUDO=(sudo)
fi

step() { printf 'install-deps: %s\n' "$*"; }
step "[1/2] apt-get update"
"${SUDO[@]}" apt-get update -q
step "[2/2] installing the ${#pkgs[@]} packages of --$set_name" \
     "(apt prints each one as it is fetched, unpacked and set up)"
"${SUDO[@]}" apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 "${pkgs[@]}"
step "done: the --$set_name dependencies are installed"
