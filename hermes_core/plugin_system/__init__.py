"""The plugin system: a per-application pluggy manager, the stevedore loader, async dispatch
and per-plugin settings validation.

Nothing here autoloads at import; every application builds its own manager.
"""

from .adapters import AdapterLoadError, resolve_adapter_classes
from .dispatch import HookTimeout, call_broadcast
from .loader import clear_entry_point_cache
from .report import LoadReport, PluginLoadError, PluginRecord
from .manager import create_plugin_manager, key_policy, session_key_for, session_shared_for
from .metadata import DistributionIndex, distribution_of
from .redaction import RedactionLogFilter, install_log_redaction, redact_for_log, redact_text, redaction_rules
from .settings import PluginSettingsError, validate_plugin_settings

__all__ = [
    "AdapterLoadError", "DistributionIndex", "HookTimeout", "LoadReport", "PluginLoadError", "PluginRecord",
    "PluginSettingsError", "RedactionLogFilter", "call_broadcast", "clear_entry_point_cache",
    "create_plugin_manager", "distribution_of", "install_log_redaction", "key_policy", "redact_for_log",
    "redact_text", "redaction_rules", "resolve_adapter_classes", "session_key_for",
    "session_shared_for",
    "validate_plugin_settings",
]
