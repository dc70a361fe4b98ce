"""Test kit for hermes_core and its plugins (CONVENTIONS.md §8).

Fixtures come from the `pytest11` entry point (`hermes_core.testing.pytest_plugin`); the
contract suites are imported from here and subclassed in a plugin's tests::

    from hermes_core.testing import AdapterContract, PluginContract, RedactionContract, SessionKeyContract

Also: `CapturingAdapter` / `FakeClock` (fakes.py), `PII_SAMPLES` (pii_corpus.py),
`write_distribution` / `DistributionSandbox` (distributions.py).
"""

import pytest

pytest.register_assert_rewrite("hermes_core.testing.contract")

from .contract import AdapterContract, PluginContract, RedactionContract, SessionKeyContract  # noqa: E402
from .distributions import DistributionSandbox, write_distribution  # noqa: E402
from .fakes import CapturingAdapter, FakeClock, SentMessage  # noqa: E402
from .pii_corpus import NON_PII_TEXTS, PII_SAMPLES, PiiSample, samples_for  # noqa: E402

__all__ = [
    "AdapterContract", "CapturingAdapter", "DistributionSandbox", "FakeClock", "NON_PII_TEXTS",
    "PII_SAMPLES", "PiiSample", "PluginContract", "RedactionContract", "SentMessage",
    "SessionKeyContract", "samples_for", "write_distribution",
]
