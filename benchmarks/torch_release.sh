#!/usr/bin/env bash
# The torch-family patches on another torch release: a throwaway venv with that torch (and the project's other pins,
# as scripts/setup.sh installs them), the focused suite and the catalogue's autopatch column, one results file.
#   bash benchmarks/torch_release.sh TORCH_VERSION [TRANSFORMERS_VERSION]        default transformers 5.23.0
# venv: /tmp/autopatch-bench/torch-<version>-transformers-<version> (reused when its torch, transformers and
# editable autopatch match); work files (junit xml, coverage json, status, logs): the same path with -run;
# result: benchmarks/results/torch-<version>-transformers-<version>.json (benchmarks/torch_release.py writes it;
# report.py shows it) and needed-torch-<version>-transformers-<version>.json (benchmarks/needed.py).
# Everything runs at `nice -n ${NICE:-19}` with one thread, one process at a time (a 2-core machine).
# pip's constraints (/etc/xdg/pip) decide which torch releases can be installed here.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH="${1:?usage: benchmarks/torch_release.sh TORCH_VERSION [TRANSFORMERS_VERSION]}"
TRANSFORMERS="${2:-5.23.0}"
NAME="torch-$TORCH-transformers-$TRANSFORMERS"
VENV="/tmp/autopatch-bench/$NAME"
WORK="/tmp/autopatch-bench/$NAME-run"
OUT="benchmarks/results/$NAME.json"
PY="$VENV/bin/python"
# The torch-family tests (symbolic shapes, and the rows inside torch.onnx's exporter), the export scope (strict and
# non-strict, threads) and the example (test_dynamic_cache.py runs `EXPORT_PATCHES=1 python examples/train_export.py`
# and the same decode step in-process).
# test_older_torch.py holds the rows only releases before 2.13 need (deselected elsewhere).
SUITE=(tests/test_torch_shapes.py tests/test_older_torch.py tests/test_onnx_names.py tests/test_onnx_translations.py
       tests/test_scope.py tests/test_dynamic_cache.py)

quiet() { OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n "${NICE:-19}" "$@"; }
pip() { quiet "$PY" -m pip -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
have() {
  quiet "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1').split('+')[0] != '$2')" 2>/dev/null
}
editable() { quiet "$PY" -c "import autopatch, sys; sys.exit(not autopatch.__file__.startswith('$PWD/'))" 2>/dev/null; }

started=$(date +%s)
mkdir -p "$WORK"
[ -x "$PY" ] || python3.11 -m venv "$VENV"
if have torch "$TORCH" && have transformers "$TRANSFORMERS" && editable; then
  echo "=== reusing $VENV"
else
  echo "=== installing torch $TORCH, transformers $TRANSFORMERS and autopatch[test] into $VENV"
  have torch "$TORCH" || pip install "torch==$TORCH"
  pip install -e ".[test]" "transformers==$TRANSFORMERS" "torch==$TORCH"
fi
have torch "$TORCH" || { echo "torch $TORCH could not be installed in $VENV (see pip's output above)" >&2; exit 1; }
have transformers "$TRANSFORMERS" || { echo "transformers $TRANSFORMERS could not be installed" >&2; exit 1; }

quiet python3 benchmarks/provenance.py > "$WORK/provenance.json"  # before the runs: the code they import

echo "=== suite: ${SUITE[*]}"
rm -f "$WORK/suite.xml"
quiet "$PY" -m pytest -p no:xdist -p no:cacheprovider -q --junitxml="$WORK/suite.xml" "${SUITE[@]}" \
  > "$WORK/suite.log" 2>&1 || true
tail -n 3 "$WORK/suite.log"

echo "=== catalogue: none and autopatch columns"
rm -f "$WORK/coverage.json"
quiet "$PY" benchmarks/coverage.py --columns none autopatch --workers 1 --no-docs --out "$WORK/coverage.json" \
  > "$WORK/coverage.log" 2>&1 || true
tail -n 3 "$WORK/coverage.log"

echo "=== needed: which default patches some catalogue case still needs on this release"
quiet "$PY" benchmarks/needed.py --coverage "$WORK/coverage.json" --python "$PY" --workers "${NEEDED_WORKERS:-1}" \
  > "$WORK/needed.log" 2>&1 || true
tail -n 1 "$WORK/needed.log"

# Which torch rows apply, drift (fingerprint changed) or skip on this release.
TORCH_ROWS='torch,torch.broadcast_refs.*,torch.backed_size_oblivious,torch.stop_if_static'  # opt-in rows included
quiet "$VENV/bin/autopatch" status --probe --patches "$TORCH_ROWS" --json > "$WORK/status.json" 2> "$WORK/status.log" \
  || true

quiet "$PY" benchmarks/torch_release.py --out "$OUT" --junit "$WORK/suite.xml" --coverage "$WORK/coverage.json" \
  --status "$WORK/status.json" --provenance "$WORK/provenance.json" --files "${SUITE[@]}" --log "$WORK/suite.log" \
  --seconds "$(( $(date +%s) - started ))" --command "bash benchmarks/torch_release.sh $TORCH $TRANSFORMERS"
