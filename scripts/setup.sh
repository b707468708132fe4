#!/usr/bin/env bash
# Creates (or refreshes) a virtual environment with autopatch installed in editable mode.
#   scripts/setup.sh [VENV_DIR] [TRANSFORMERS_VERSION] [EXTRA_PACKAGE...]      defaults: .venv 5.23.0
# EXTRA_PACKAGE: pinned packages some runs need besides the test extras (executorch for transformers' ExecuTorch
# exporter: about 500 MB, so only in the venv whose tests use it).
# torch is pinned to the CPU build this machine (and CI) has on disk; a looser spec pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
TRANSFORMERS="${2:-5.23.0}"
EXTRAS=("${@:3}")
TORCH="2.13.0"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
have() { "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }

have torch "$TORCH+cpu" || have torch "$TORCH" || pip install "torch==$TORCH"
have transformers "$TRANSFORMERS" || pip install "transformers==$TRANSFORMERS"
# Editable, with the test extras; reinstalled every time so the .pth/.start doors match the checkout. transformers
# is named again so that the resolver keeps its requirements (4.x needs huggingface-hub<1; the latest diffusers
# would otherwise upgrade the hub past it and break transformers).
pip install -e ".[test]" "transformers==$TRANSFORMERS"
for extra in "${EXTRAS[@]}"; do
  have "${extra%%==*}" "${extra#*==}" || pip install "$extra" "torch==$TORCH" "transformers==$TRANSFORMERS"
done
"$VENV/bin/python" -c "import torch, transformers, autopatch; print('$VENV: torch', torch.__version__, 'transformers', transformers.__version__)"
