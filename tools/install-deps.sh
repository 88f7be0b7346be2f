#!/usr/bin/env bash
# Installs hark's build and test dependencies on Debian 12 (run as root, or with sudo).
# CUDA is optional: when nvcc is on PATH or under /usr/local/cuda, `make` also builds the GPU code.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
    build-essential pkg-config \
    libsndfile1-dev libsoxr-dev libfftw3-dev libsleef-dev libopenblas-dev libcjson-dev \
    libuv1-dev libhttp-parser-dev zlib1g-dev libcairo2-dev \
    libnghttp2-dev libwslay-dev libprotobuf-c-dev protobuf-c-compiler \
    python3-grpcio python3-grpc-tools python3-protobuf \
    python3 python3-numpy python3-yaml python3-torch python3-torchaudio python3-requests curl \
    python3-unidecode python3-inflect python3-websocket python3-selenium chromium chromium-driver \
    clang libclang-rt-14-dev cppcheck clang-format \
    > /dev/null
