#!/usr/bin/env bash
# Regenerates every benchmark result and docs/coverage.md, in both project venvs.
#
#   bash benchmarks/run_all.sh            # SWEEP=1 (0 skips the sweep), SWEEP_LIMIT=0 (seconds per venv; 0: all), REPEAT=7
#
# Steps: onnx-diagnostic's throwaway venvs under /tmp (setup_onnx_diagnostic.sh); the coverage matrix in .venv
# (transformers 5.x) and .venv-tf4 (4.57) side by side, one worker each (2 children at once: the reference
# machine has 2 cores), plain-export columns; transformers' own exporters' columns in .venv, merged into its
# file (EXPORTERS=0 skips them); the sweep of every architecture in both (sweep.py: about an hour; a sweep cut by
# SWEEP_LIMIT resumes where it stopped when run again at the same commit); the overhead
# ratios and the interpreter start-up (.venv); the report.  Timings go to benchmarks/results/run_all.json and the top of docs/coverage.md.
# Every results file records the commit it was measured at and whether the tree was dirty (provenance.py).
set -u
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
SWEEP="${SWEEP:-1}"
SWEEP_LIMIT="${SWEEP_LIMIT:-0}"
REPEAT="${REPEAT:-7}"
TIMEOUT="${TIMEOUT:-300}"
LOGS="${LOGS:-/tmp/autopatch-bench/logs}"
mkdir -p "$LOGS" benchmarks/results
start=$(date +%s)
# The code this run measures (commit, dirty), taken before any step rewrites the results: `"commit": ..., "dirty": ...`
CODE=$(.venv/bin/python benchmarks/provenance.py)
CODE=${CODE#\{}
CODE=${CODE%\}}
CODE=${CODE:-'"commit": null, "dirty": null'}
declare -A steps

step() {  # name, then the command; keeps going when a step fails (its log says why)
    local name="$1"; shift
    local t0=$(date +%s)
    echo "== $name: $*"
    "$@" || echo "!! $name failed (exit $?)"
    steps[$name]=$(( $(date +%s) - t0 ))
}

for v in .venv .venv-tf4; do
    "$v/bin/python" -c "import matplotlib" 2>/dev/null || "$v/bin/pip" install -q matplotlib || true
done

step onnx_diagnostic_venvs bash benchmarks/setup_onnx_diagnostic.sh

# The plain-export columns; transformers' own exporters are the next step's (5.x only, merged into the same file).
PLAIN="none autopatch autopatch_strict transformers onnx_diagnostic onnx_diagnostic_off"
coverage_both() {
    .venv/bin/python benchmarks/coverage.py --columns $PLAIN --workers 1 --timeout "$TIMEOUT" --no-docs > "$LOGS/coverage-tf5.log" 2>&1 &
    local a=$!
    .venv-tf4/bin/python benchmarks/coverage.py --columns $PLAIN --workers 1 --timeout "$TIMEOUT" --no-docs > "$LOGS/coverage-tf4.log" 2>&1 &
    local b=$!
    wait $a; wait $b
    tail -n 5 "$LOGS/coverage-tf5.log" "$LOGS/coverage-tf4.log"
}
step coverage coverage_both
# onnx-diagnostic at its best: 0.9.3 with its newest working transformers (5.12.1, .venv-tf512), beside autopatch.
if [ -x .venv-tf512/bin/python ]; then
    step coverage_tf512 .venv-tf512/bin/python benchmarks/coverage.py --columns none autopatch onnx_diagnostic \
        onnx_diagnostic_off --workers 2 --timeout "$TIMEOUT" --no-docs
fi
# EXPORTERS=0 skips transformers' exporters (their columns keep what the results file holds, with its commit).
if [ "${EXPORTERS:-1}" != "0" ]; then
    step exporters .venv/bin/python benchmarks/coverage.py --merge --columns hf_dynamo hf_dynamo_autopatch hf_onnx \
        hf_onnx_autopatch --workers 2 --timeout "$TIMEOUT" --no-docs
fi

sweep_both() {
    .venv/bin/python benchmarks/sweep.py --workers 1 --limit "$SWEEP_LIMIT" --no-docs > "$LOGS/sweep-tf5.log" 2>&1 &
    local a=$!
    .venv-tf4/bin/python benchmarks/sweep.py --workers 1 --limit "$SWEEP_LIMIT" --no-docs > "$LOGS/sweep-tf4.log" 2>&1 &
    local b=$!
    wait $a; wait $b
    tail -n 2 "$LOGS/sweep-tf5.log" "$LOGS/sweep-tf4.log"
}
if [ "$SWEEP" != "0" ]; then step sweep sweep_both; fi

step overhead .venv/bin/python benchmarks/overhead.py --repeat "$REPEAT"
step startup .venv/bin/python benchmarks/startup.py --repeat 40

total=$(( $(date +%s) - start ))
{
    printf '{"meta": {"seconds": %d, "date": "%s", "machine": "%s cpus", %s}, "steps": {' "$total" "$(date -Iseconds)" "$(nproc)" "$CODE"
    sep=""
    for k in "${!steps[@]}"; do printf '%s"%s": %d' "$sep" "$k" "${steps[$k]}"; sep=", "; done
    printf '}}\n'
} > benchmarks/results/run_all.json
.venv/bin/python benchmarks/report.py
echo "run_all: ${total} s (logs in $LOGS)"
