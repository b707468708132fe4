#!/usr/bin/env bash
# Throwaway venvs for the coverage matrix's onnx-diagnostic columns, under /tmp (never inside the repo).
#
#   bash benchmarks/setup_onnx_diagnostic.sh   # -> /tmp/autopatch-bench/od-tf523, od-tf457, od-tf512 (one per project venv)
#
# onnx-diagnostic declares no dependency on torch or transformers, so each venv gets onnx-diagnostic (no deps)
# plus the few packages its import needs (optree, scipy, onnx, onnxruntime), and sees the torch and transformers
# of one project venv through a .pth line; the venv is named after that transformers (major and minor), which is
# how coverage.py finds it.  Each gets the onnx-diagnostic release written for its transformers: 0.9.3 (the newest)
# takes transformers 5's mask signature (q_length=) and builds empty masks from 4.57's (cache_position=), so 4.x
# gets 0.9.2.  .venv-tf512 (5.12.1) is onnx-diagnostic 0.9.3's newest working transformers: the peer at its best.
# Nothing here changes the project venvs.  A failed install is not an error: coverage.py then reports the column
# as "unavailable" with the reason.
set -u
REPO="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="${AUTOPATCH_BENCH_TMP:-/tmp/autopatch-bench}"
mkdir -p "$ROOT"
for name in .venv .venv-tf4 .venv-tf512; do
    base="$REPO/$name"
    [ -x "$base/bin/python" ] || { echo "skip: no $base"; continue; }
    tf="$("$base/bin/python" -c 'import transformers; print(transformers.__version__)')" || { echo "skip $name: no transformers"; continue; }
    case "$tf" in 4.*) want=0.9.2 ;; *) want=0.9.3 ;; esac
    venv="$ROOT/od-tf$(echo "$tf" | cut -d. -f1,2 | tr -d .)"
    have="$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('onnx-diagnostic'))" 2>/dev/null)"
    if [ "$have" = "$want" ]; then
        echo "$venv: onnx-diagnostic $have already installed"
        continue
    fi
    rm -rf "$venv"
    site="$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    basepy="$("$base/bin/python" -c 'import sys, os; print(os.path.join(sys.base_prefix, "bin", "python3"))')"
    "$basepy" -m venv "$venv" || { echo "cannot create $venv"; continue; }
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "onnx-diagnostic==$want" || echo "onnx-diagnostic: install failed"
    "$venv/bin/pip" install -q --disable-pip-version-check optree scipy onnx onnxruntime || echo "its import dependencies: install failed"
    own="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$site" > "$own/zz_project_venv.pth"
    "$venv/bin/python" -c "import importlib.metadata as m, transformers; print('$venv: onnx-diagnostic', m.version('onnx-diagnostic'), 'transformers', transformers.__version__)" || true
done
