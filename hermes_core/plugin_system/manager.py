"""Per-application plugin manager (docs/architecture.md §3).

Registration order (pluggy calls LIFO, so the last registered is consulted first within a band):
builtins → entry-point plugins (sorted by name) → deployment overrides. Builtins are `trylast`
and overrides `tryfirst`, so deployment > plugins > builtins for every firstresult hook.
"""

from __future__ import annotations

import logging

import pluggy

from .. import hookspecs
from ..builtin import BUILTIN_MODULES
from ..builtin.identity import PLUGIN_NAME as IDENTITY_PLUGIN, IdentityAliases
from ..model.source import SessionSource
from ..types import KeyPolicy

log = logging.getLogger(__name__)


def create_plugin_manager(config=None, *, autoload: bool = True, raise_on_fatal: bool = True):
    """Build a fresh plugin manager for one application (never a module global).

    Args:
        config: a `GatewayConfig` (`[plugins]` allow / deny / strict / safe_mode / overrides,
            enabled platforms); None → builtins only.
        autoload: discover `hermes_core.plugins` entry points (also switched off by
            `HERMES_DISABLE_PLUGIN_AUTOLOAD=1`).
        raise_on_fatal: raise `PluginLoadError` on a fatal load failure (start-up); False only
            reports it in the LoadReport (`hermes-gateway plugins`).

    Returns:
        `(pm, report)`: the pluggy PluginManager and the `LoadReport` of what loaded or failed.

    Raises:
        PluginLoadError: an enabled platform's plugin failed, a failure under `[plugins] strict`,
            or a deployment override could not be imported.
        pluggy.PluginValidationError: a hook implementation does not match its spec.
    """
    from .loader import LoadReport, load_entry_point_plugins, load_overrides

    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for module in BUILTIN_MODULES:
        pm.register(module, name=f"builtin:{module.__name__.rsplit('.', 1)[-1]}")
    pm.register(IdentityAliases(), name=IDENTITY_PLUGIN)
    report = LoadReport()
    if config is not None:
        if autoload:
            load_entry_point_plugins(pm, config, report, raise_on_fatal=raise_on_fatal)
        load_overrides(pm, config, report, raise_on_fatal=raise_on_fatal)
    pm.check_pending()
    if _trace_enabled():
        _install_tracing(pm)
    if config is not None:
        pm.hook.hermes_configure.call_historic(kwargs={"config": config})
    return pm, report


_INSTALLED: dict[str, object] = {}


def installed_plugin_manager():
    """The plugin manager a gateway start would build in this process: builtins, the installed
    entry-point plugins and the deployment overrides of the loaded config (`load_config()`:
    HERMES_HOME's config file and `HERMES_*` variables). Built on first use, then reused.

    For code written against the seed's signatures (`hermes_core.build_session_context`, …),
    which take no plugin manager: a platform's `pii_safe` declaration and every plugin's hooks
    count there exactly as in a running gateway. A running gateway passes its own manager.

    Raises:
        ConfigError: the config cannot be loaded (one line naming the key or file).
        PluginLoadError: an enabled platform's plugin or an override failed to load.
    """
    pm = _INSTALLED.get("pm")
    if pm is None:
        from ..settings import load_config

        pm, _report = create_plugin_manager(load_config())
        _INSTALLED["pm"] = pm
    return pm


def _trace_enabled() -> bool:
    import os

    return os.environ.get("HERMES_TRACE_PLUGINS", "").strip() not in ("", "0", "false")


def _install_tracing(pm) -> None:
    """`HERMES_TRACE_PLUGINS=1`: log hook and plugin names and argument *types* only, never
    values (message bodies and phone numbers must not reach logs; docs/architecture.md §4)."""

    def before(hook_name, hook_impls, kwargs):
        log.info("hook %s -> [%s] (%s)", hook_name, ", ".join(i.plugin_name for i in hook_impls),
                 ", ".join(f"{k}: {type(v).__name__}" for k, v in kwargs.items()))

    def after(outcome, hook_name, hook_impls, kwargs):
        log.info("hook %s done: %s", hook_name, type(outcome.get_result()).__name__
                 if outcome.exception is None else type(outcome.exception).__name__)

    pm.add_hookcall_monitoring(before, after)


def attach_identity_aliases(pm, resolve) -> None:
    """Let the builtin `hermes_canonical_identity` follow a store's identity aliases.

    Args:
        pm: a manager made by `create_plugin_manager`.
        resolve: `(platform, id) -> canonical id` (`SessionStore.resolve_identity`), or None to
            detach.
    """
    plugin = pm.get_plugin(IDENTITY_PLUGIN)
    if plugin is not None:
        plugin.resolve = resolve


def key_policy(pm, config) -> KeyPolicy:
    """The KeyPolicy for `config`, with canonicalisation routed through the
    `hermes_canonical_identity` hook chain (so plugin alias stores apply to keys)."""

    def canonicalize(platform: str, kind: str, value: str) -> str:
        result = pm.hook.hermes_canonical_identity(platform=platform, kind=kind, value=value)
        return value if result is None else result

    return KeyPolicy(
        group_sessions_per_user=config.group_sessions_per_user,
        thread_sessions_per_user=config.thread_sessions_per_user,
        canonicalize=canonicalize,
    )


def session_key_for(pm, policy: KeyPolicy, source: SessionSource) -> str:
    """Ask the `hermes_session_key` hook for the key of `source`.

    Raises:
        RuntimeError: every implementation deferred (cannot happen with the builtin present).
    """
    key = pm.hook.hermes_session_key(source=source, policy=policy)
    if not key:
        raise RuntimeError(f"no hermes_session_key implementation returned a key for {source.platform}")
    return key


def session_shared_for(pm, policy: KeyPolicy, source: SessionSource) -> bool:
    """Ask the `hermes_session_shared` hook whether `source` is a shared multi-user session."""
    return bool(pm.hook.hermes_session_shared(source=source, policy=policy))
