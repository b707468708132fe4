#!/usr/bin/env bash
# Throwaway venvs for the coverage matrix's onnx-diagnostic column, under /tmp (never inside the repo).
#
#   bash benchmarks/setup_onnx_diagnostic.sh        # -> /tmp/autopatch-bench/od-tf5, /tmp/autopatch-bench/od-tf4
#
# onnx-diagnostic declares no dependency on torch or transformers, so each venv gets onnx-diagnostic (no deps)
# plus the few packages its import needs (optree, scipy, onnx, onnxruntime), and sees the torch and transformers
# of one project venv (.venv: transformers 5.x, .venv-tf4: 4.57) through a .pth line: the newest transformers
# it can be tried with is the one the project tests.  Nothing here changes the project venvs.  A failed install
# is not an error: coverage.py then reports the column as "unavailable" with the reason.
set -u
REPO="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="${AUTOPATCH_BENCH_TMP:-/tmp/autopatch-bench}"
mkdir -p "$ROOT"
for pair in tf5:.venv tf4:.venv-tf4; do
    tag="${pair%%:*}"
    base="$REPO/${pair#*:}"
    venv="$ROOT/od-$tag"
    [ -x "$base/bin/python" ] || { echo "skip $tag: no $base"; continue; }
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m; m.version('onnx-diagnostic')" 2>/dev/null; then
        echo "$venv: onnx-diagnostic already installed"
        continue
    fi
    site="$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    basepy="$("$base/bin/python" -c 'import sys, os; print(os.path.join(sys.base_prefix, "bin", "python3"))')"
    "$basepy" -m venv "$venv" || { echo "cannot create $venv"; continue; }
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps onnx-diagnostic || echo "onnx-diagnostic: install failed"
    "$venv/bin/pip" install -q --disable-pip-version-check optree scipy onnx onnxruntime || echo "its import dependencies: install failed"
    own="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$site" > "$own/zz_project_venv.pth"
    "$venv/bin/python" -c "import importlib.metadata as m, transformers; print('$venv: onnx-diagnostic', m.version('onnx-diagnostic'), 'transformers', transformers.__version__)" || true
done
