"""Test kit for hermes_core and its plugins (docs/architecture.md §8).

Fixtures come from the `pytest11` entry point (`hermes_core.testing.pytest_plugin`); the
contract suites are imported from here and subclassed in a plugin's tests::

    from hermes_core.testing import AdapterContract, PluginContract, RedactionContract, SessionKeyContract
    from hermes_core.testing import StoreBackendContract    # store engines (store_contract.py)

Also: `CapturingAdapter` / `FakeGateway` / `FakeClock` / `HeldEchoAgent` (fakes.py), `PII_SAMPLES` (pii_corpus.py),
`write_distribution` / `DistributionSandbox` (distributions.py), and for crash tests a real
`hermes-gateway run` process: `start_gateway` / `gateway_env` / `wait_for_delivered` (process.py).

The kit modules are imported lazily (PEP 562), after they are registered for pytest's assertion
rewriting, so failing contract checks show the compared values.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

pytest.register_assert_rewrite("hermes_core.testing.contract", "hermes_core.testing.fakes",
                               "hermes_core.testing.distributions", "hermes_core.testing.store_contract")

_EXPORTS = {
    "AdapterContract": "contract", "PluginContract": "contract", "RedactionContract": "contract",
    "SessionKeyContract": "contract", "exact_length_text": "contract",
    "DistributionSandbox": "distributions", "write_distribution": "distributions",
    "CapturingAdapter": "fakes", "FakeClock": "fakes", "FakeGateway": "fakes", "GatewayRefused": "fakes",
    "HeldEchoAgent": "fakes", "SentMessage": "fakes",
    "NON_PII_TEXTS": "pii_corpus", "PII_SAMPLES": "pii_corpus", "PiiSample": "pii_corpus",
    "samples_for": "pii_corpus",
    "StoreBackendContract": "store_contract",
    "GATEWAY_SCRIPT": "process", "count_delivered": "process", "gateway_env": "process",
    "start_gateway": "process", "wait_for_delivered": "process",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hermes_core.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
