"""pytest11 entry point of the hermes_core test kit (docs/architecture.md §8).

Installed with the core, so a plugin's tests get these fixtures with no conftest:

* `hermes_config`      a `GatewayConfig` rooted in a temporary HERMES_HOME, no platforms;
* `hermes_pm`          a fresh plugin manager with the builtins only (autoload off);
* `plugin_registration` `register(plugin, pm=None, name=None)`: registered for one test, then
                       unregistered (llm / datasette style);
* `plugin_distributions` a `DistributionSandbox`: write tiny installed-looking distributions with
                       real entry points onto `sys.path` (stevedore caches cleared, a temporary
                       `XDG_CACHE_HOME`), undone after the test;
* `fake_clock`         a `FakeClock` (aware UTC; `advance(seconds)`, `sleep` that only records);
* `captured_deliveries` a `CapturingAdapter` (platform `fake`) recording every send;
* `make_app`           `make_app(plugins=[…], settings={…}, adapters=…, agent=…)` → an unstarted
                       `hermes_core.app.GatewayApp` on a temporary home; apps it made and started are
                       stopped after the test (skips when the app layer is unavailable);
* `temp_store` / `memory_store` an open `hermes_core.store.SessionStore` on a temporary home,
                       closed after the test (skips when the store layer is unavailable).

Markers: `hermes_live` (opt-in checks against real platform APIs; never in CI).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterable

import pytest

# The package __init__ registered the kit modules for assertion rewriting before any of them is
# imported (this module's parent package is necessarily imported first).
from .distributions import DistributionSandbox  # noqa: E402  (after register_assert_rewrite)
from .fakes import CapturingAdapter, FakeClock  # noqa: E402

try:  # async fixtures need pytest-asyncio (the core's `test` extra installs it)
    import pytest_asyncio

    _async_fixture = pytest_asyncio.fixture
except ImportError:  # pragma: no cover - the kit still offers its sync fixtures
    pytest_asyncio = None
    _async_fixture = None


def pytest_configure(config):
    config.addinivalue_line("markers", "hermes_live: opt-in checks against a real platform API (needs tokens)")


def _config(home, settings: Mapping[str, Any] | None = None):
    from ..settings import GatewayConfig

    values = {"platforms": {}}
    values.update(settings or {})
    return GatewayConfig(home=home, **values)


@pytest.fixture
def hermes_config(tmp_path, monkeypatch):
    """A GatewayConfig on `tmp_path/hermes` that ignores the developer's own config file."""
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    return _config(tmp_path / "hermes")


@pytest.fixture
def hermes_pm():
    """A fresh plugin manager: hookspecs and builtins only, no entry-point plugins."""
    from ..plugin_system.manager import create_plugin_manager

    pm, _report = create_plugin_manager(None)
    return pm


@pytest.fixture
def plugin_registration(hermes_pm):
    """`register(plugin, pm=None, name=None) -> name`: register `plugin` (a module or object with
    hookimpls) into `pm` (default `hermes_pm`) for this test only."""
    registered: list[tuple[Any, str]] = []

    def register(plugin: Any, pm: Any = None, name: str | None = None) -> str:
        target = pm if pm is not None else hermes_pm
        plugin_name = target.register(plugin, name=name)
        registered.append((target, plugin_name))
        return plugin_name

    yield register
    for target, plugin_name in reversed(registered):
        if target.get_plugin(plugin_name) is not None:
            target.unregister(name=plugin_name)


@pytest.fixture
def plugin_distributions(tmp_path, monkeypatch):
    """A `DistributionSandbox` under `tmp_path/dists` (see `hermes_core.testing.distributions`)."""
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    try:  # stevedore computed its cache folder at import; point it at the temporary one too
        from stevedore import _cache

        monkeypatch.setattr(_cache._c, "_dir", str(cache / "python-entrypoints"))
    except (ImportError, AttributeError):
        pass
    sandbox = DistributionSandbox(tmp_path / "dists")
    yield sandbox
    sandbox.close()


@pytest.fixture
def fake_clock():
    """A FakeClock starting at 2026-01-01T12:00:00Z."""
    return FakeClock()


@pytest.fixture
def captured_deliveries():
    """A CapturingAdapter: `captured_deliveries.sent` lists every send (platform `fake`)."""
    return CapturingAdapter()


def _import_app():
    try:
        from ..app import GatewayApp
    except ImportError as exc:  # the app layer is optional for adapter-only plugin tests
        pytest.skip(f"hermes_core.app.GatewayApp is not available: {exc}")
    return GatewayApp


def _import_store():
    try:
        from ..store import SessionStore
    except ImportError as exc:
        pytest.skip(f"hermes_core.store.SessionStore is not available: {exc}")
    return SessionStore


class AppFactory:
    """Builds GatewayApps on temporary homes (devpi `makexom` style); see `make_app`."""

    def __init__(self, base, clock: FakeClock):
        self.base = base
        self.clock = clock
        self.apps: list[Any] = []

    def __call__(self, plugins: Iterable[Any] = (), settings: Mapping[str, Any] | None = None, *,
                 adapters: Any = None, agent: Any = None, watcher: bool = False, clock: Any = None):
        """Build an unstarted app.

        Args:
            plugins: plugin modules/objects registered after the builtins (in order).
            settings: GatewayConfig keyword overrides (e.g. `{"group_sessions_per_user": False}`).
                Without a `platforms` key, each adapter's platform gets `allow_all = true`, so
                the app answers everyone (docs/behaviour.md §9); pass `platforms` to test access.
            adapters: adapter instances (default: one `CapturingAdapter`, platform `fake`).
            agent: the Agent (default: the config's, i.e. the echo agent).
            watcher: start the housekeeping watcher (default False in tests).
            clock: aware-UTC clock (default: the test's `fake_clock`).
        """
        from ..plugin_system.manager import create_plugin_manager

        GatewayApp = _import_app()
        home = self.base / f"app{len(self.apps)}"
        adapters = adapters if adapters is not None else [CapturingAdapter()]
        settings = dict(settings or {})
        if "platforms" not in settings:
            names = adapters.keys() if isinstance(adapters, Mapping) else [a.spec.name for a in adapters]
            settings["platforms"] = {name: {"allow_all": True} for name in names}
        config = _config(home, settings)
        pm, _report = create_plugin_manager(config, autoload=False)
        for index, plugin in enumerate(plugins):
            pm.register(plugin, name=getattr(plugin, "__name__", None) or f"test-plugin-{index}")
        app = GatewayApp(config, pm=pm, adapters=adapters, agent=agent, watcher=watcher, clock=clock or self.clock)
        self.apps.append(app)
        return app

    async def stop_all(self) -> None:
        for app in reversed(self.apps):
            if getattr(app, "started", False):
                await app.stop()


if _async_fixture is not None:

    @_async_fixture
    async def make_app(tmp_path, fake_clock, monkeypatch):
        """`make_app(plugins=[…], settings={…}, adapters=…, agent=…)` → an unstarted GatewayApp;
        started apps are stopped after the test."""
        monkeypatch.delenv("HERMES_CONFIG", raising=False)
        factory = AppFactory(tmp_path / "apps", fake_clock)
        yield factory
        await factory.stop_all()

    @_async_fixture
    async def temp_store(hermes_config, fake_clock):
        """An open SessionStore on a temporary home (closed after the test)."""
        SessionStore = _import_store()
        store = SessionStore(hermes_config.sessions_dir, hermes_config, clock=fake_clock)
        await store.open()
        yield store
        await store.close()

    @_async_fixture
    async def memory_store(temp_store):
        """Alias of `temp_store` (a throwaway store; SQLite lives in the temporary home)."""
        yield temp_store

else:  # pragma: no cover

    @pytest.fixture
    def make_app(tmp_path, fake_clock):
        return AppFactory(tmp_path / "apps", fake_clock)


__all__ = ["AppFactory"]
