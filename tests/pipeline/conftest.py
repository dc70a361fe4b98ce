"""Pipeline tests: make this folder importable, so the tests share `pipeline_helpers`.

Tests are imported with --import-mode=importlib, which does not put their folder on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
