"""Per-application plugin manager (CONVENTIONS.md §3).

Registration order (pluggy calls LIFO, so the last registered is consulted first within a band):
builtins → entry-point plugins (sorted by name) → deployment overrides. Builtins are `trylast`
and overrides `tryfirst`, so deployment > plugins > builtins for every firstresult hook.
"""

from __future__ import annotations

import logging

import pluggy

from .. import hookspecs
from ..builtin import BUILTIN_MODULES
from ..model.source import SessionSource
from ..types import KeyPolicy

log = logging.getLogger(__name__)


def create_plugin_manager(config=None, *, autoload: bool = True):
    """Build a fresh plugin manager for one application.

    Args:
        config: a `GatewayConfig` (plugin allow/deny lists, overrides); None → builtins only.
        autoload: discover `hermes_core.plugins` entry points (also switched off by
            `HERMES_DISABLE_PLUGIN_AUTOLOAD=1`).

    Returns:
        `(pm, report)`: the pluggy PluginManager and the `LoadReport` of what loaded or failed.
    """
    from .loader import LoadReport, load_entry_point_plugins, load_overrides

    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for module in BUILTIN_MODULES:
        pm.register(module, name=f"builtin:{module.__name__.rsplit('.', 1)[-1]}")
    report = LoadReport()
    if config is not None:
        if autoload:
            load_entry_point_plugins(pm, config, report)
        load_overrides(pm, config, report)
    pm.check_pending()
    if config is not None:
        pm.hook.hermes_configure.call_historic(kwargs={"config": config})
    return pm, report


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
