#!/usr/bin/env bash
# Install (see install.sh) and run every test: the core's and every plugin's.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
