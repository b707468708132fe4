#!/usr/bin/env bash
# The test suite, on transformers 5.23 (latest) and 4.57.6 (last 4.x), each in its own venv.
#   scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for pair in ".venv:5.23.0" ".venv-tf4:4.57.6"; do
  venv="${pair%%:*}"; tf="${pair##*:}"
  bash scripts/setup.sh "$venv" "$tf"
  echo "=== tests on transformers $tf ($venv)"
  "$venv/bin/python" -m pytest -n 2 -q "$@" || status=$?
done
exit $status
