#!/usr/bin/env bash
# The main job: set up, then export the bundled example with zero code change.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh .venv 5.23.0
EXPORT_PATCHES=1 .venv/bin/python examples/train_export.py
