"""Per-plugin settings (docs/architecture.md §5): validate `[platforms.<id>]` tables into each
plugin's own pydantic model after the plugins have loaded.

The root `GatewayConfig.platforms` keeps the raw tables (`repr=False`); this module turns each into
the model the owning plugin declared through `hermes_settings_schema` (or, failing that, the
adapter's `spec.settings_model`). Every table also accepts the common keys of
`sdk.settings.PlatformSettings` (access lists, home channel, `edits_as_turns`); a plugin model
normally subclasses it and so validates them itself. For a model that does not, the common keys
are validated separately (`common_platform_settings`) and removed before the plugin's model
sees the table. `enabled` and `adapter` belong to the core. Error messages name the section, the
key and where its value came from (docs/configuration.md §1), but never the value, because
values may be tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ValidationError

from ..sdk.settings import COMMON_PLATFORM_KEYS, PlatformSettings
from ..settings import ConfigError, config_file_path, error_words, find_value_source
from ..types import SettingsSpec
from .loader import ADAPTERS_GROUP, close_platform, entry_point_names, installed_platforms_note
from .report import LoadReport

log = logging.getLogger(__name__)

# `[platforms.<id>]` keys owned by the core, never passed to a plugin's model.
CORE_PLATFORM_KEYS = frozenset({"enabled", "adapter"})


class PluginSettingsError(ConfigError):
    """A plugin settings table is invalid, duplicated, or belongs to no installed plugin while
    enabled. `str(err)` is one line naming the section and key (never the value)."""


def collect_settings_specs(pm) -> dict[str, tuple[str, SettingsSpec]]:
    """Gather every `SettingsSpec` from `hermes_settings_schema`.

    Returns:
        `{section: (plugin_name, spec)}`.

    Raises:
        PluginSettingsError: two plugins declare the same section, or a plugin returns something
            that is not a SettingsSpec with a pydantic model.
    """
    found: dict[str, tuple[str, SettingsSpec]] = {}
    for impl in reversed(pm.hook.hermes_settings_schema.get_hookimpls()):
        if pm.is_blocked(impl.plugin_name):
            continue
        specs = impl.function() or ()
        if isinstance(specs, SettingsSpec):
            specs = (specs,)
        for spec in specs:
            if not isinstance(spec, SettingsSpec) or not (
                    isinstance(spec.model, type) and issubclass(spec.model, BaseModel)):
                raise PluginSettingsError(
                    f"plugin {impl.plugin_name!r}: hermes_settings_schema must return SettingsSpec"
                    f" records with a pydantic model, got {type(spec).__name__}")
            if spec.section in found:
                other = found[spec.section][0]
                raise PluginSettingsError(
                    f"settings section [{spec.table}.{spec.section}] is declared by both"
                    f" {other!r} and {impl.plugin_name!r}")
            found[spec.section] = (impl.plugin_name, spec)
    return found


def _describe(section: str, err: ValidationError, toml_path: Path | None,
              model: type[BaseModel] = PlatformSettings) -> str:
    """One line for the invalid `[platforms.<section>]` table: each invalid key with the words of
    `error_words` (an unknown key with the one it likely meant among every key the table takes:
    `model`'s, the common platform keys and `enabled` / `adapter`) and where its value came from;
    never a value."""
    known = {*model.model_fields, *COMMON_PLATFORM_KEYS, *CORE_PLATFORM_KEYS}
    parts = []
    for item in err.errors():
        loc = [str(p) for p in item.get("loc", ())]
        # Where the value came from, as the core's settings errors say it (docs/configuration.md
        # §1): the table may come from the environment, not the file the section's name suggests.
        source = find_value_source(["platforms", section, *loc], {}, toml_path) if toml_path else None
        words = error_words(item, known if len(loc) == 1 else ())
        # A validator's message may name its key in full already (`platforms.whatsapp.allowed_users:
        # 'Carol Smith' can never match …`): not named twice.
        named = words if loc and words.startswith(f"platforms.{section}.{'.'.join(loc)}") else (
            f"{'.'.join(loc) or '<table>'}: {words}")
        parts.append(named + (f" ({source})" if source else ""))
    return f"invalid settings in [platforms.{section}]: " + "; ".join(parts)


def _validate_common(section: str, table: Mapping[str, Any], toml_path: Path | None = None) -> PlatformSettings:
    try:
        return PlatformSettings.model_validate({k: v for k, v in table.items() if k in COMMON_PLATFORM_KEYS})
    except ValidationError as err:
        raise PluginSettingsError(_describe(section, err, toml_path)) from None


def validate_section(section: str, model: type[BaseModel], table: Mapping[str, Any], *,
                     toml_path: Path | None = None) -> BaseModel:
    """Validate one `[platforms.<section>]` table into `model`.

    A `PlatformSettings` subclass receives the whole table (common keys included). Any other
    model receives the table without `enabled` / `adapter` and without the common keys it does
    not declare itself; those are checked against `PlatformSettings` first.

    Args:
        toml_path: the config file the table may come from (`config_file_path(config.home)`);
            with it, each invalid key is followed by where its value came from (an environment
            variable, the `.env` file or this file), when one of them holds it.

    Raises:
        PluginSettingsError: a key is unknown (when the model forbids extras) or a value is
            invalid; the message names section, key and source, never the value.
    """
    if issubclass(model, PlatformSettings):
        data = dict(table)
    else:
        _validate_common(section, table, toml_path)
        own = set(model.model_fields)
        data = {k: v for k, v in table.items()
                if k not in CORE_PLATFORM_KEYS and (k not in COMMON_PLATFORM_KEYS or k in own)}
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise PluginSettingsError(_describe(section, err, toml_path, model)) from None


def common_platform_settings(config, validated: Mapping[str, BaseModel]) -> dict[str, PlatformSettings]:
    """The common keys (`PlatformSettings`) of every `[platforms.<id>]` table in `config`, for the
    core's own use (access control, home channel; docs/behaviour.md §9).

    Args:
        config: the `GatewayConfig` (its raw `platforms` tables).
        validated: the result of `validate_plugin_settings`; a model that subclasses
            PlatformSettings is used as it is.

    Returns:
        `{section: PlatformSettings}`. A disabled platform whose common keys are invalid gets the
        defaults (the error is logged, naming section and key).

    Raises:
        PluginSettingsError: an enabled platform's common keys are invalid.
    """
    out: dict[str, PlatformSettings] = {}
    for section, table in (config.platforms or {}).items():
        model = validated.get(section)
        if isinstance(model, PlatformSettings):
            out[section] = model
            continue
        if not isinstance(table, Mapping):
            continue
        try:
            out[section] = _validate_common(section, table, config_file_path(config.home))
        except PluginSettingsError as exc:
            if table.get("enabled"):
                raise
            log.warning("%s (platform disabled; defaults used)", exc)
            out[section] = PlatformSettings()
    return out


def _provided(section: str, table: Mapping[str, Any], models: Mapping[str, Any], installed: set[str]) -> bool:
    """A `[platforms.<section>]` table is provided by a plugin's settings model, an installed
    adapter entry point, or its own `adapter = "pkg.mod:Class"` key."""
    return section in models or section in installed or "adapter" in table


def _unprovided_sections(config, models: Mapping[str, Any], provided: set[str]) -> list[str]:
    """The `[platforms.<id>]` tables of `config` that nothing provides (`_provided`: no settings
    model in `models`, no id in `provided`, no `adapter` key of their own), in name order."""
    return [section for section, table in sorted((config.platforms or {}).items())
            if isinstance(table, Mapping) and not _provided(section, table, models, provided)]


def _unprovided_text(section: str, installed: Iterable[str]) -> str:
    """The words for a `[platforms.<section>]` table that no installed plugin provides, naming
    the installed platform ids and the close one: the same from `run`, `doctor` and `chat`."""
    return (f"[platforms.{section}] is configured but no installed plugin provides it; ignored"
            f" ({installed_platforms_note(section, installed)})")


def _warn_unprovided(section: str, installed: Iterable[str], report: LoadReport | None) -> str:
    """Log (and add to `report`) the warning for a `[platforms.<section>]` table that no
    installed plugin provides (`_unprovided_text`)."""
    text = _unprovided_text(section, installed)
    log.warning("%s", text)
    if report is not None:
        report.warnings.append(text)
    return text


def warn_unprovided_platforms(pm, config, *, running: Iterable[str] = (),
                              report: LoadReport | None = None) -> list[str]:
    """Warn about each `[platforms.<id>]` table that no installed plugin provides, for a gateway
    given its adapters (`chat`'s terminal, docs/configuration.md §2 `[platforms.<id>]`): the
    other tables are not validated there, since their platforms do not run, but a misspelt
    table name (`[platforms.telegrm]`) must not pass in silence.

    Args:
        pm: the application's plugin manager (its `hermes_settings_schema` sections count as
            provided, as in `validate_plugin_settings`).
        config: the `GatewayConfig` (its raw `platforms` tables).
        running: the platform ids of the adapters given to the gateway (provided by them).
        report: the load's `LoadReport`, whose `warnings` get each line too.

    Returns:
        The warning lines, one per table, in table-name order (each also logged as a warning);
        none when the plugins' settings sections cannot be collected (a section declared twice:
        `run` refuses to start for it, and names it).
    """
    try:
        models = collect_settings_specs(pm)
    except PluginSettingsError as exc:
        log.debug("platform tables not checked: %s", exc)
        return []
    installed = set(entry_point_names(ADAPTERS_GROUP))
    return [_warn_unprovided(section, installed, report)
            for section in _unprovided_sections(config, models, installed | set(running))]


def unprovided_platform_notes(config) -> list[str]:
    """What `run` adds when no platform is enabled (docs/configuration.md §2 `[platforms.<id>]`):
    one line per `[platforms.<id>]` table that no installed adapter entry point provides and
    that names no `adapter` of its own, in `_warn_unprovided`'s words. A misspelt table
    (`[platforms.telegrm]`) may be why nothing is enabled, and enabling it would not help.

    No plugin is loaded: a platform runs only through an adapter, so a settings section that a
    plugin declares without one is no platform either.

    Args:
        config: the `GatewayConfig` (its raw `platforms` tables); the installed platform ids are
            the `hermes_core.adapters` entry points' names, read without importing them.

    Returns:
        The lines in table-name order; none when every table is provided.
    """
    installed = set(entry_point_names(ADAPTERS_GROUP))
    return [_unprovided_text(section, installed) for section in _unprovided_sections(config, {}, installed)]


def validate_plugin_settings(pm, config, *, adapter_classes: Mapping[str, type] | None = None,
                             installed_adapters: Iterable[str] | None = None,
                             report: LoadReport | None = None) -> dict[str, BaseModel]:
    """Validate every `[platforms.<id>]` table into its plugin's settings model (docs/architecture.md §5).

    Args:
        pm: the application's plugin manager (after loading).
        config: the `GatewayConfig` (its raw `platforms` tables).
        adapter_classes: `{platform: adapter class}` already resolved; an adapter's
            `spec.settings_model` is used for sections no `hermes_settings_schema` declares.
        installed_adapters: names of installed `hermes_core.adapters` entry points (default:
            read from the entry points without importing them).
        report: the load's `LoadReport`; the warning for a table no installed plugin provides
            is added to its `warnings` too (`doctor` shows them as rows).

    Returns:
        `{section: validated model}` for every section that has a model (the app keeps these and
        drops the raw dicts). Sections declared by a plugin but absent from the config are
        validated from their defaults when that succeeds (a model with a required token is
        simply left out while its platform is not configured).

    Raises:
        PluginSettingsError: invalid table of an enabled platform; duplicate section; an enabled
            section that no installed plugin or adapter provides (the message names the
            installed platform ids and the close one: `loader.installed_platforms_note`).

    Logs a warning (naming section and key, never the value) for an invalid table of a disabled
    platform, and for a disabled section that nothing provides.
    """
    specs = collect_settings_specs(pm)
    models: dict[str, type[BaseModel]] = {section: spec.model for section, (_, spec) in specs.items()}
    for platform, cls in (adapter_classes or {}).items():
        spec = getattr(cls, "spec", None)
        if spec is not None and spec.settings_model is not None:
            models.setdefault(platform, spec.settings_model)
    installed = set(entry_point_names(ADAPTERS_GROUP) if installed_adapters is None else installed_adapters)
    toml_path = config_file_path(config.home)

    validated: dict[str, BaseModel] = {}
    for section, table in sorted((config.platforms or {}).items()):
        if not isinstance(table, Mapping):
            raise PluginSettingsError(f"[platforms.{section}] must be a table, got {type(table).__name__}")
        enabled = bool(table.get("enabled"))
        model = models.get(section)
        if model is not None:
            try:
                validated[section] = validate_section(section, model, table, toml_path=toml_path)
            except PluginSettingsError as exc:
                if enabled:
                    raise
                # A disabled platform's table cannot break start-up, but its mistake is named.
                log.warning("%s (platform disabled; table ignored)", exc)
            continue
        if not _provided(section, table, models, installed):
            if enabled:
                # A close installed id means a typo: no package to install (a `pip install` of
                # the misspelt name could fetch somebody else's).
                install = ("" if close_platform(section, installed) else
                           f"; install its package, e.g. `pip install hermes-gateway-{section}`")
                raise PluginSettingsError(
                    f"[platforms.{section}] is enabled but no installed plugin provides platform"
                    f" {section!r} ({installed_platforms_note(section, installed)}{install})")
            _warn_unprovided(section, installed, report)
            continue
        try:
            _validate_common(section, table, toml_path)
        except PluginSettingsError:
            if enabled:
                raise
        extra = sorted(set(table) - COMMON_PLATFORM_KEYS)
        if extra:
            log.warning("[platforms.%s] has keys %s but its plugin declares no settings model; ignored",
                        section, ", ".join(extra))
    for section, model in models.items():
        if section in validated:
            continue
        try:
            validated[section] = model.model_validate({})
        except ValidationError:
            log.debug("settings of %s have required keys and no table; left out", section)
    return validated
