#!/usr/bin/env bash
# The test suite on transformers 5.23 (latest) and 4.57.6 (last 4.x), each in its own venv; then older versions:
# tests/test_legacy_caches.py on 4.48.3, 4.52.4 and 4.55.4 (one venv, transformers swapped in ascending order: a
# swap takes ~25 s where a new venv takes ~95 s, torch's install most of it); in another, on 5.3.0 the caches
# (model-local state-space and hybrid caches, as 4.x), RoPE, MoE, generation, Mamba prefill and the VLMs
# (get_placeholder_mask's 5.0-5.11 check); then, swapped up to 5.12.1 (the venv the benchmarks' onnx-diagnostic
# column reads), DynamicCache with one-tensor linear-attention layers, Mamba/Jamba decode, RoPE, Mamba prefill, VLMs
# (Idefics2 through ONNX among them). A fourth field names pinned packages for that venv alone (executorch:
# transformers' ExecuTorch exporter, tested on 5.23).
# Two workers that steal tests from each other, so neither waits at the end on the other's queue (the two were busy
# ~90% of the wall time with the default split; stealing measured a small gain:
# 4.57, 15m08 -> 14m49, six sliding-window tests fewer too).
#   scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
# Nothing is downloaded (models are built from config classes): a stray hub call fails at once instead of waiting
# on a network CI does not have.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
status=0
while IFS='|' read -r venv tf only extras; do
  [ -n "$venv" ] || continue
  # shellcheck disable=SC2086  # extras: a space-separated list of pinned packages
  bash scripts/setup.sh "$venv" "$tf" $extras < /dev/null
  echo "=== tests on transformers $tf ($venv)${only:+: $only}"
  rc=0
  eval "\"$venv/bin/python\" -m pytest -n 2 --dist worksteal -q $only \"\$@\"" < /dev/null || rc=$?
  # 5: no test selected. A failure, except in a partial run when you passed pytest args of your own (they may
  # select none of its tests): a whole run that selects nothing in some venv has lost its tests.
  if [ "$rc" -ne 0 ] && ! { [ -n "$only" ] && [ "$#" -gt 0 ] && [ "$rc" -eq 5 ]; }; then status=$rc; fi
done <<'RUNS'
.venv|5.23.0||executorch==1.5.1
.venv-tf4|4.57.6|
.venv-tf4-legacy|4.48.3|tests/test_legacy_caches.py
.venv-tf4-legacy|4.52.4|tests/test_legacy_caches.py
.venv-tf4-legacy|4.55.4|tests/test_legacy_caches.py
.venv-tf512|5.3.0|tests/test_dynamic_cache.py tests/test_caches.py tests/test_transformers_rope.py tests/test_transformers_moe.py tests/test_transformers_generation.py tests/test_transformers_ssm.py tests/test_transformers_vision.py
.venv-tf512|5.12.1|tests/test_dynamic_cache.py tests/test_caches.py tests/test_transformers_rope.py tests/test_transformers_ssm.py tests/test_transformers_vision.py tests/test_onnx_dropped_checks.py -k 'test_dynamic_cache or state_space or hybrid_decode or rope or ssm or vision'
RUNS
exit $status
