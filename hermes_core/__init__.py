"""hermes_core: the session lifecycle of an AI-agent messaging gateway.

Layout (imports flow downwards only):
    model/          data model: SessionSource, SessionEntry, MessageEvent, SessionContext
    keys.py         session keys and the isolation rule (seed §4, §5)
    hookspecs.py    pluggy hook specifications; markers.py: hookimpl / override
    types.py        typed records passed through hooks
    settings.py     GatewayConfig (pydantic-settings)
    builtin/        default hook implementations (trylast)
    plugin_system/  per-application plugin manager, stevedore loader, async dispatch
    store/          SQLite (aiosqlite, WAL, FTS5) store and the sessions.json mirror
    agents/         the Agent interface and its backends (echo, openai)
    sdk/            what platform plugins build on: adapter base class, send helpers
    pipeline/       the gateway runner: key → session → transcript → agent → delivery
    recovery/       restart and crash recovery (seed §7)
    cli/            the `hermes-gateway` command
    testing/        fixtures and contract suites for plugin authors (pytest11)
"""

from .keys import build_session_key, canonical_whatsapp_identifier, is_shared_multi_user_session
from .markers import HERMES_PLUGIN_API, hookimpl, override
from .model import (
    MessageEvent,
    Platform,
    SessionContext,
    SessionEntry,
    SessionSource,
)
from .settings import ConfigError, GatewayConfig, load_config
from .types import AdapterSpec, DeliveryPlan, KeyPolicy, RecoveryPlan, RedactionRule, SettingsSpec

__version__ = "0.1.0"

# The seed's public API (seed §3, §9), under the names and signatures the seed gives them, so code
# written against the seed runs: `SessionStore(sessions_dir, config, has_active_processes_fn=None)`,
# `build_session_context(source, config, session_entry=None)`,
# `build_session_context_prompt(context, *, redact_pii=False)`. Resolved on first access (PEP 562):
# `import hermes_core` stays light for plugins, which only need the markers.
_LAZY = {
    "SessionStore": ("hermes_core.store", "SessionStore"),
    "build_session_context": ("hermes_core.pipeline.context", "build_session_context"),
    "build_session_context_prompt": ("hermes_core.pipeline.context", "build_session_context_prompt"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hermes_core' has no attribute {name!r}")


__all__ = [
    "AdapterSpec", "ConfigError", "DeliveryPlan", "GatewayConfig", "HERMES_PLUGIN_API", "KeyPolicy",
    "MessageEvent", "Platform", "RecoveryPlan", "RedactionRule", "SessionContext", "SessionEntry",
    "SessionSource", "SessionStore", "SettingsSpec", "__version__", "build_session_context",
    "build_session_context_prompt", "build_session_key",
    "canonical_whatsapp_identifier", "hookimpl", "is_shared_multi_user_session", "load_config",
    "override",
]
