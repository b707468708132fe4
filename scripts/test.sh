#!/usr/bin/env bash
# The test suite on transformers 5.23 (latest) and 4.57.6 (last 4.x), each in its own venv; then the caches of
# older transformers (tests/test_legacy_caches.py) on 4.48.3, 4.52.4 and 4.55.4, in three more.
#   scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for entry in ".venv:5.23.0:" ".venv-tf4:4.57.6:" \
             ".venv-tf448:4.48.3:tests/test_legacy_caches.py" ".venv-tf452:4.52.4:tests/test_legacy_caches.py" \
             ".venv-tf455:4.55.4:tests/test_legacy_caches.py"; do
  IFS=: read -r venv tf only <<< "$entry"
  bash scripts/setup.sh "$venv" "$tf"
  echo "=== tests on transformers $tf ($venv)${only:+: $only}"
  rc=0
  "$venv/bin/python" -m pytest -n 2 -q $only "$@" || rc=$?
  # 5: nothing collected (pytest args that select no legacy test): not a failure.
  if [ "$rc" -ne 0 ] && ! { [ -n "$only" ] && [ "$rc" -eq 5 ]; }; then status=$rc; fi
done
exit $status
