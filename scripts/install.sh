#!/usr/bin/env bash
# Create ./.venv and install the core with its test extra plus every in-repo platform plugin,
# editable, in ONE pip command so the local core satisfies the plugins' dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
args=(-e ".[test]")
for plugin in plugins/*/; do
  [ -f "$plugin/pyproject.toml" ] && args+=(-e "$plugin")
done
.venv/bin/python -m pip install --quiet "${args[@]}"
