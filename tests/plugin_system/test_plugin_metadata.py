"""Distribution names and versions in load reports (docs/architecture.md §3 listing, §10 pitfall
"versions missing"): one fresh snapshot per load, never a stale process-wide cache."""

import importlib.metadata
import sys

import pytest

from hermes_core.plugin_system.loader import DistributionIndex, LoadReport, distribution_of
from hermes_core.plugin_system.metadata import distribution_of as metadata_distribution_of
from hermes_core.testing.distributions import write_distribution


@pytest.fixture
def site_dir(tmp_path):
    """An (initially empty) folder on sys.path, standing in for site-packages."""
    root = tmp_path / "site"
    root.mkdir()
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in [n for n, m in sys.modules.items() if (getattr(m, "__file__", None) or "").startswith(str(root))]:
        del sys.modules[name]


def _install(root):
    # What `pip install hermes-gateway-lateacme` does to site-packages, in the running process.
    write_distribution(root, "hermes-gateway-lateacme", version="2.3.4",
                       modules={"lateacme_pkg/__init__.py": "", "lateacme_pkg/hooks.py": ""},
                       entry_points={"hermes_core.plugins": {"lateacme": "lateacme_pkg.hooks"}})


def test_a_distribution_installed_after_a_load_is_seen_by_the_next_load(site_dir):
    first = LoadReport()
    assert first.distributions.lookup("lateacme_pkg.hooks") == (None, None)
    _install(site_dir)
    # No clear_entry_point_cache(): the next load (a new report) takes a new snapshot.
    assert LoadReport().distributions.lookup("lateacme_pkg.hooks") == ("hermes-gateway-lateacme", "2.3.4")
    assert distribution_of("lateacme_pkg") == ("hermes-gateway-lateacme", "2.3.4")
    # One load keeps one consistent snapshot.
    assert first.distributions.lookup("lateacme_pkg.hooks") == (None, None)


def test_index_names_installed_distributions_and_nothing_for_local_modules():
    index = DistributionIndex()
    assert index.lookup("pluggy._hooks") == ("pluggy", importlib.metadata.version("pluggy"))
    assert index.lookup("no_such_module_anywhere") == (None, None)
    assert index.lookup(None) == (None, None)
    assert index.lookup("") == (None, None)


def test_public_names_stay_importable_from_the_loader():
    from hermes_core.plugin_system import loader, policy, report

    assert loader.distribution_of is metadata_distribution_of
    assert loader.check_plugin_policies is policy.check_plugin_policies
    assert loader.plugin_api_error is policy.plugin_api_error
    assert loader.PluginRecord is report.PluginRecord
    assert loader.PluginLoadError is report.PluginLoadError
