"""The plugin system: a per-application pluggy manager, the stevedore loader and async dispatch.

Nothing here autoloads at import; every application builds its own manager.
"""

from .manager import create_plugin_manager, key_policy, session_key_for, session_shared_for

__all__ = ["create_plugin_manager", "key_policy", "session_key_for", "session_shared_for"]
