"""Gateway configuration (pydantic-settings; docs/architecture.md §5; seed appendix).

Sources, strongest first: keyword arguments > `HERMES_*` environment variables (nested with
`__`, e.g. `HERMES_AGENT__AGENT_CACHE__MAX_SIZE=64`) > `.env` > `/run/secrets` > the TOML file
(`$HERMES_CONFIG`, default `$HERMES_HOME/hermes.toml`) > defaults. This is Prefect's order:
env beats files, files beat defaults.

The seed's appendix keys keep their names and nesting: top-level `group_sessions_per_user`,
`thread_sessions_per_user`, `session_store_max_age_days`; `[agent]` and `[agent.agent_cache]`.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, ValidationError, field_validator,
                      model_validator)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from .strict_numbers import NoBoolNumbers
from .types import DEFAULT_ERROR_NOTICE

CONFIG_FILE_NAME = "hermes.toml"
log = logging.getLogger(__name__)

# Session-reset timers of upstream gateways (seed §6 "conversation lifetime": idle and daily
# resets are not supported). A config carried over keeps loading: these top-level keys are
# dropped with one warning naming them; every other unknown key is still an error.
LEGACY_TIMER_KEYS = ("session_reset", "default_reset_policy", "reset_by_type", "reset_by_platform")


class ConfigError(Exception):
    """Configuration could not be loaded; `str(err)` is one line naming the key or file."""


class _Section(NoBoolNumbers):
    model_config = ConfigDict(extra="forbid")


class AgentCacheSettings(_Section):
    """`[agent.agent_cache]` (seed §11 and appendix)."""

    max_size: int = Field(128, ge=1, description="LRU entries of cached agents")
    idle_ttl_secs: int = Field(3600, ge=0, description="seconds idle before soft release")
    memory_high_mb: int | Literal["auto", "off"] = Field(
        "auto", description="anonymous-memory budget in MiB; auto = from cgroup/RAM; 0/off disables")
    max_evictions_per_pass: int = Field(16, ge=0)
    protect_recent: int = Field(8, ge=0)


class OpenAIAgentSettings(_Section):
    """`[agent.openai]`: any OpenAI-compatible chat-completions server."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "gpt-4o-mini"
    api_key: SecretStr = SecretStr("not-needed")
    request_timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(2, ge=0)
    system_prompt: str = "You are a helpful assistant reached through a messaging gateway."


class CompressionSettings(_Section):
    """`[agent.compression]`: context compression (docs/behaviour.md §11)."""

    threshold: float = Field(0.8, gt=0, le=1, description="share of agent.context_window above which the "
                             "last prompt triggers automatic compression")
    keep_recent: int = Field(20, ge=1, description="most recent messages kept verbatim by a compression")


class AgentSettings(_Section):
    """`[agent]` (seed appendix) plus the agent backend choice."""

    backend: Literal["echo", "openai"] = "echo"
    gateway_auto_continue_freshness: int = Field(
        3600, description="seconds within which an interrupted turn auto-continues; <= 0: no limit")
    gateway_timeout: int = Field(1800, gt=0, description="seconds per agent turn")
    context_window: int = Field(128000, ge=0, description="tokens the model accepts in one prompt; "
                                "0 disables automatic compression")
    compression: CompressionSettings = Field(default_factory=CompressionSettings)
    agent_cache: AgentCacheSettings = Field(default_factory=AgentCacheSettings)
    openai: OpenAIAgentSettings = Field(default_factory=OpenAIAgentSettings)


class CoreSettings(_Section):
    """`[core]`: gateway-wide behaviour."""

    max_input_chars: int = Field(32000, ge=1, description="longest accepted user message, in characters")
    busy_input_mode: Literal["interrupt", "queue", "steer"] = "interrupt"
    db_path: Path | None = Field(None, description="default: $HERMES_HOME/state.db")

    @field_validator("db_path", mode="before")
    @classmethod
    def _blank_db_path_is_unset(cls, value: Any) -> Any:
        # As for HERMES_HOME: `HERMES_CORE__DB_PATH=` means the default, not Path("") — the
        # current directory, which SQLite cannot open, so every start ran degraded
        # (docs/configuration.md §2).
        return None if isinstance(value, str) and not value.strip() else value
    # What a chat is told when its message could not be answered; the detail goes to the log only
    # (users never see internal errors, URLs or exception names). Hook `hermes_failure_notice`
    # may word it per case.
    agent_failure_notice: str = Field(
        "Sorry, I could not answer this message. Please try again later.", min_length=1,
        description="sent when the model backend fails")
    error_notice: str = Field(
        DEFAULT_ERROR_NOTICE, min_length=1,
        description="sent when the gateway itself fails on a message")
    # A busy gateway keeps many live objects that the default of 700 makes the collector traverse
    # again and again (docs/behaviour.md §12 "Garbage collection").
    # le: gc.set_threshold takes a C int; a larger value failed at start naming no key.
    gc_young_threshold: int = Field(200_000, ge=0, le=2**31 - 1,
                                    description="the least net allocations between two young garbage collections "
                                    "(the threshold follows the live heap above it); 0 keeps the "
                                    "interpreter's (700), fixed")


class StorageSettings(_Section):
    """`[storage]`: SQLite and the sessions.json mirror."""

    busy_timeout_s: float = Field(5.0, gt=0)
    mirror_debounce_s: float = Field(0.25, ge=0, description="sessions.json write debounce")
    fts_check_interval_s: float = Field(3600.0, gt=0)
    # ~1.4 KB an entry: 16384 is ~23 MB, and a gateway with that many active chats decodes no
    # route from state.db per message (docs/configuration.md).
    entry_cache_size: int = Field(16384, ge=0, description="session entries the store keeps in memory (LRU)")


ONE_YEAR_S = 365 * 86400


BUILTIN_STORE = "sqlite"  # `[store] backend` of the engine built into the core


class StoreSettings(_Section):
    """`[store]`: which engine holds routes, sessions and transcripts (docs/architecture.md §7).

    `sqlite` is built in (`state.db`, with the degraded fallback); any other name is looked up
    in the `hermes_core.store_backends` entry-point group (e.g. `postgres`, from
    hermes-gateway-postgres)."""

    backend: str = Field(BUILTIN_STORE, min_length=1, description="store engine: sqlite or an installed backend")
    dsn: SecretStr | None = Field(None, description="connection string of a server store backend")
    # 1 s to a year: the lease's end is `now() + ttl` on the database's clock, and a ttl of
    # 1e308 overflowed PostgreSQL's interval at every sweep (nothing was ever answered); one
    # of milliseconds ran out before the write that took it (docs/configuration.md §2).
    lease_ttl_s: float = Field(30.0, ge=1, le=ONE_YEAR_S, description="seconds a session lease lasts unless renewed")
    poll_interval_s: float = Field(1.0, gt=0, description="seconds between polls for work of other replicas")

    @property
    def builtin(self) -> bool:
        """True for the built-in engine (`state.db`, with the degraded fallback); False for one
        from an entry point: a server store, which several replicas may share."""
        return self.backend == BUILTIN_STORE


class SchedulerSettings(_Section):
    """`[scheduler]`: the housekeeping watcher (APScheduler)."""

    # At most a year each: the watcher's next run is a calendar date, and a tick tens of
    # thousands of years away failed at start ('date value out of range') or in the scheduler.
    interval_s: float = Field(60.0, gt=0, le=ONE_YEAR_S)
    jitter_s: float = Field(0.0, ge=0, le=ONE_YEAR_S)
    tick_timeout_s: float = Field(30.0, gt=0)
    drain_timeout_s: float = Field(10.0, ge=0)


class RedactionSettings(_Section):
    """`[redaction]`: PII pseudonymisation in the LLM context (seed §9; opt-in)."""

    enabled: bool = False


class MetricsSettings(_Section):
    """`[metrics]`: the Prometheus `/metrics`, `/healthz` and `/readyz` endpoints (docs/operations.md §3)."""

    enabled: bool = False
    listen: str = Field("127.0.0.1", min_length=1, description="address the endpoints bind to")
    port: int = Field(9464, ge=0, le=65535, description="0 picks a free port")


class StatusSettings(_Section):
    """`[status]`: the status file a running gateway keeps for `hermes-gateway status`."""

    interval_s: float = Field(5.0, gt=0, description="seconds between two refreshes of status.json")


class LoggingSettings(_Section):
    """`[logging]`: the format of `gateway.log` (docs/operations.md §4)."""

    format: Literal["text", "json"] = "text"


class PluginsSettings(_Section):
    """`[plugins]` (docs/architecture.md §3)."""

    enabled: list[str] = Field(default_factory=list)
    allow: list[str] | None = None
    deny: list[str] = Field(default_factory=list)
    strict: bool = False
    safe_mode: bool = False
    overrides: list[str] = Field(default_factory=list)
    allow_local_file: bool = False
    hook_timeout_s: float = Field(10.0, gt=0)
    setup_timeout_s: float = Field(30.0, gt=0)


def env_home() -> str | None:
    """`$HERMES_HOME` when set to something; an empty (or blank) value counts as unset, so the
    settings' `home`, the config-file path and every start-up check agree on `~/.hermes`."""
    value = os.environ.get("HERMES_HOME")
    return value if value and value.strip() else None


def absolute_home(home: Path | str) -> Path:
    """HERMES_HOME `home` as the absolute path every message, log line, the lock file's record
    and the status file name: `~` expanded, a relative path made absolute against the working
    directory of the process that read it (docs/operations.md §5). Read once, where the home is
    read: a `status` run from another directory must name the same home. Symlinks are kept as
    written (`os.path.abspath`, not `resolve`): the operator's own spelling of the place."""
    return Path(os.path.abspath(Path(home).expanduser()))


def default_home() -> Path:
    """`$HERMES_HOME`, else `~/.hermes` (an empty `HERMES_HOME` is unset), as an absolute path
    (`absolute_home`)."""
    return absolute_home(env_home() or Path.home() / ".hermes")


def explicit_config_path() -> Path | None:
    """`$HERMES_CONFIG` when set (non-empty): a config file named on purpose, which must exist."""
    explicit = os.environ.get("HERMES_CONFIG")
    return Path(explicit).expanduser() if explicit and explicit.strip() else None


def config_file_path(home: Path | str | None = None) -> Path:
    """`$HERMES_CONFIG`, else `<home>/hermes.toml` (`home` made absolute, `absolute_home`)."""
    explicit = explicit_config_path()
    if explicit is not None:
        return explicit
    return absolute_home(home) / CONFIG_FILE_NAME if home else default_home() / CONFIG_FILE_NAME


class GatewayConfig(NoBoolNumbers, BaseSettings):
    """Root settings of one gateway (seed appendix; docs/architecture.md §5).

    Construct in code with keyword overrides (`GatewayConfig(home=tmp, group_sessions_per_user=False)`)
    or through `load_config()`, which turns every failure into a one-line `ConfigError`.

    Raises:
        pydantic.ValidationError: a value has the wrong type or range.
        tomllib.TOMLDecodeError: the config file is not valid TOML.
    """

    model_config = SettingsConfigDict(
        env_prefix="HERMES_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="forbid",
        secrets_dir=None,
    )

    home: Path = Field(default_factory=default_home, description="HERMES_HOME")
    group_sessions_per_user: bool = True
    thread_sessions_per_user: bool = False
    session_store_max_age_days: int = Field(0, description="prune routes older than N days; 0 disables")
    agent: AgentSettings = Field(default_factory=AgentSettings)
    core: CoreSettings = Field(default_factory=CoreSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    redaction: RedactionSettings = Field(default_factory=RedactionSettings)
    plugins: PluginsSettings = Field(default_factory=PluginsSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    status: StatusSettings = Field(default_factory=StatusSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    # Raw per-platform tables; validated into each plugin's own model after plugins load
    # (docs/architecture.md §5). repr=False keeps tokens out of logs.
    platforms: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"local": {"enabled": True}}, repr=False)

    # The legacy session-reset timer settings the loaded config named and this gateway ignores
    # (`legacy_setting_warnings`); kept on the config rather than logged while it loads, so the
    # CLI prints them once, as its other config warnings (docs/configuration.md §1).
    _ignored_legacy: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _ignore_legacy_timer_keys(cls, data: Any, handler: Any) -> Any:
        found = [key for key in data if key in LEGACY_TIMER_KEYS] if isinstance(data, Mapping) else []
        if not found:
            return handler(data)
        names = []
        for key in found:
            value = data[key]
            names += [f"{key}.{sub}" for sub in value] if isinstance(value, Mapping) and value else [key]
        config = handler({key: value for key, value in data.items() if key not in found})
        config._ignored_legacy = tuple(sorted(names))
        return config

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return absolute_home(value)

    @property
    def db_path(self) -> Path:
        """`[core] db_path`, default `<home>/state.db`."""
        return self.core.db_path or self.home / "state.db"

    @property
    def sessions_dir(self) -> Path:
        """`<home>/sessions` (holds `sessions.json`)."""
        return self.home / "sessions"

    def enabled_platforms(self) -> list[str]:
        """Names of `[platforms.<id>]` tables with `enabled = true`, sorted."""
        return sorted(name for name, table in self.platforms.items()
                      if isinstance(table, dict) and table.get("enabled"))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        _drop_plugin_allowlist_env(env_settings)
        _drop_empty_home_env(env_settings)
        _drop_empty_home_env(dotenv_settings)
        init_home = getattr(init_settings, "init_kwargs", {}).get("home")
        toml_path = config_file_path(init_home)
        toml = TomlConfigSettingsSource(settings_cls, toml_file=toml_path if toml_path.is_file() else None)
        return (init_settings, env_settings, dotenv_settings, file_secret_settings, toml)


def _drop_plugin_allowlist_env(env_settings: PydanticBaseSettingsSource) -> None:
    """`HERMES_PLUGINS=telegram,slack` is the loader's plugin allowlist (docs/architecture.md §3), not
    the `[plugins]` table: hide it from the env source unless it is a JSON object."""
    env_vars = getattr(env_settings, "env_vars", None)
    if not env_vars:
        return
    for key in [k for k in env_vars if _is_plugin_allowlist(k, env_vars[k])]:
        env_settings.env_vars = {k: v for k, v in env_vars.items() if k != key}


def _is_plugin_allowlist(name: str, value: str | None) -> bool:
    """True for `HERMES_PLUGINS` holding the loader's allowlist (anything but a JSON object)."""
    return name.lower() == "hermes_plugins" and not str(value or "").lstrip().startswith("{")


def _drop_empty_home_env(env_settings: PydanticBaseSettingsSource) -> None:
    """`HERMES_HOME=` (empty or blank) is unset: without this the env source would turn it into
    `Path("")`, the current directory, while `config_file_path()` looks in `~/.hermes`."""
    env_vars = getattr(env_settings, "env_vars", None)
    if not env_vars:
        return
    blank = [k for k in env_vars if k.lower() == "hermes_home" and not str(env_vars[k] or "").strip()]
    if blank:
        env_settings.env_vars = {k: v for k, v in env_vars.items() if k not in blank}


_SECRET_WORDS = ("key", "token", "secret", "password", "credential", "auth")
# Values that look like credentials wherever they were put (a bot token in a table's place):
# Telegram `<digits>:<35 chars>`, Slack `xox?-…`/`xapp-…`, `sk-…`, GitHub `gh?_…`, a JWT, or any
# run of 20+ characters without blanks that mixes letters and digits.
_SECRET_LOOKING = re.compile(
    r"\d{5,}:[\w-]{20,}|xox[a-z]-|xapp-|sk-[\w-]{8,}|gh[pousr]_\w{8,}|eyJ[\w-]{8,}\.|"
    r"^(?=[^\s]*[A-Za-z])(?=[^\s]*\d)[^\s]{20,}$")


def _looks_like_secret(value: Any) -> bool:
    """True when `value` (shown in a config error) might be a credential."""
    return isinstance(value, str) and bool(_SECRET_LOOKING.search(value.strip()))


def _error_key_path(error: Mapping[str, Any]) -> list[str]:
    """The config key of one pydantic error as a list of names (`["agent", "gateway_timeout"]`).

    pydantic appends union-member tags (`'int'`, `"literal['auto','off']"`) and list indices to
    `loc`; walking the model keeps only real field names (plus the unknown name itself for an
    `extra_forbidden` error and the table name under a dict field such as `platforms`)."""
    model: Any = GatewayConfig
    path: list[str] = []
    loc = [str(part) for part in error.get("loc", ())]
    for index, part in enumerate(loc):
        fields = getattr(model, "model_fields", None) if isinstance(model, type) else None
        if fields is None:
            break
        if part not in fields:
            if error.get("type") == "extra_forbidden" and index == len(loc) - 1:
                path.append(part)
            break
        path.append(part)
        annotation = fields[part].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
            continue
        if typing.get_origin(annotation) is dict and index + 1 < len(loc):
            path.append(loc[index + 1])  # `[platforms.<name>]`: the table is the key
        break
    return path


def is_secret_annotation(annotation: Any) -> bool:
    """True when a settings field of type `annotation` holds a secret: `SecretStr`, also inside
    a union or a container (`SecretStr | None`)."""
    if annotation is SecretStr:
        return True
    return any(is_secret_annotation(arg) for arg in typing.get_args(annotation))


def secrets_in_config_file(toml_path: Path, tables: Mapping[tuple[str, ...], type[BaseModel]]) -> list[str]:
    """The secret settings (`is_secret_annotation` fields) the config file `toml_path` writes out,
    as dotted keys in file order of `tables`, e.g. `["agent.openai.api_key",
    "platforms.telegram.bot_token"]`: docs/configuration.md §1 keeps secrets in the environment
    or a `.env` file, never in the config file. Values are never read out.

    Args:
        toml_path: the config file (`config_file_path`); a missing or unreadable one holds none.
        tables: where each settings model sits in the file (`()` for `GatewayConfig`,
            `("platforms", "telegram")` for a platform's model); nested models are walked.
    """
    try:
        with toml_path.open("rb") as fh:
            tree = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return []

    def walk(prefix: tuple[str, ...], model: type[BaseModel]):
        for name, field in model.model_fields.items():
            if is_secret_annotation(field.annotation):
                yield [*prefix, name]
            elif isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                yield from walk((*prefix, name), field.annotation)

    return [".".join(path) for prefix, model in tables.items() for path in walk(prefix, model) if _lookup(tree, path)]


def _lookup(tree: Any, path: list[str], *, fold_case: bool = False) -> bool:
    """True when the nested mapping `tree` holds a value at `path` (or a non-table on the way,
    which is then the bad value); `fold_case` matches keys case-insensitively, as
    pydantic-settings reads an environment variable's JSON object."""
    node = tree
    for part in path:
        if not isinstance(node, Mapping):
            return True
        matches = [k for k in node if (str(k).lower() == part.lower() if fold_case else str(k) == part)]
        if not matches:
            return False
        node = node[matches[0]]
    return True


def _env_variable_for(path: list[str], environ: Mapping[str, str | None]) -> str | None:
    """The `HERMES_*` variable (as spelled in `environ`) that supplied `path`: the most specific
    name first (`HERMES_AGENT__GATEWAY_TIMEOUT`), then a JSON-valued parent (`HERMES_AGENT`)
    whose object holds the rest of `path` (a parent that is not a JSON object, e.g. a
    comma-separated id list, is the bad value itself). Names are case-insensitive, as
    pydantic-settings reads them."""
    by_lower = {str(k).lower(): k for k in environ}
    for depth in range(len(path), 0, -1):
        wanted = ("HERMES_" + "__".join(path[:depth])).lower()
        if wanted in by_lower:
            value = environ[by_lower[wanted]]
            if _is_plugin_allowlist(wanted, value):
                continue  # the loader's allowlist, hidden from the settings source
            if depth < len(path) and not _lookup(_json_or_none(value), path[depth:], fold_case=True):
                # pydantic-settings merges its object with the file's table: a key it does not
                # hold came from elsewhere (the config file), which must be named instead.
                continue
            return str(by_lower[wanted])
    return None


def _json_or_none(value: str | None) -> Any:
    """`value` parsed as JSON, or None when it is not JSON (`_lookup` then takes it for the
    holder of any key under it, a non-table on the way)."""
    try:
        return json.loads(value or "")
    except ValueError:
        return None


def _bom_note(path: Path) -> str:
    """What to add to a TOML error when the file starts with a UTF-8 byte order mark, which
    TOML does not allow and some editors write; the parser's own words point at column 1 only."""
    try:
        with path.open("rb") as fh:
            bom = fh.read(3) == b"\xef\xbb\xbf"
    except OSError:
        return ""
    return "; the file starts with a UTF-8 byte order mark (BOM): save it as UTF-8 without one" if bom else ""


def _is_utf8(path: Path) -> bool:
    """True when `path` is missing, unreadable (reported otherwise) or decodes as UTF-8."""
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    except OSError:
        pass
    return True


def _dotenv_path() -> Path | None:
    """The `.env` file pydantic-settings reads (relative to the working directory), or None
    when reading one is switched off."""
    env_file = GatewayConfig.model_config.get("env_file")
    return Path(str(env_file)) if env_file else None


def _dotenv_values() -> tuple[Path, dict[str, str | None]] | None:
    path = _dotenv_path()
    if path is None or not path.is_file():
        return None
    try:
        from dotenv import dotenv_values  # pydantic-settings' own dependency
        return path.resolve(), dict(dotenv_values(path))
    except Exception:  # an unreadable .env: pydantic-settings reported it already
        return None


def describe_value_source(path: list[str], overrides: Mapping[str, Any], toml_path: Path) -> str:
    """Name where the value at config key `path` came from (`find_value_source`), falling back
    to a list of the places it could have come from when none holds it."""
    found = find_value_source(path, overrides, toml_path)
    if found is not None:
        return found
    where = f"config file {toml_path}" if toml_path.is_file() else f"no config file at {toml_path}"
    return f"from keyword arguments, HERMES_* environment variables or .env; {where}"


def find_value_source(path: list[str], overrides: Mapping[str, Any], toml_path: Path) -> str | None:
    """Name where the value at config key `path` (lower-case names, e.g. `["agent",
    "gateway_timeout"]`) came from, strongest source first (the order `GatewayConfig` merges
    them): `keyword argument 'agent'`, `environment variable HERMES_AGENT__GATEWAY_TIMEOUT`,
    `.env file /abs/.env (HERMES_…)`, `config file /abs/hermes.toml`; None when none of them
    holds it. Shared with the platform tables' errors (`plugin_system.settings`)."""
    if path and _lookup(overrides, path):
        return f"keyword argument {path[0]!r}"
    variable = _env_variable_for(path, os.environ) if path else None
    if variable:
        return f"environment variable {variable}"
    dotenv = _dotenv_values() if path else None
    if dotenv is not None:
        variable = _env_variable_for(path, dotenv[1])
        if variable:
            return f".env file {dotenv[0]} ({variable})"
    if path and toml_path.is_file():
        try:
            with toml_path.open("rb") as fh:
                if _lookup(tomllib.load(fh), path):
                    return f"config file {toml_path}"
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            pass
    return None


_VALUE_NOT_SHOWN = frozenset({"extra_forbidden", "dict_type", "model_type", "model_attributes_type"})
# pydantic's errors for a value that is not a table: its words name the model class
# ("… or instance of AgentSettings"), which the operator never wrote; the key says which table.
_TABLE_EXPECTED = frozenset({"dict_type", "model_type", "model_attributes_type"})


def error_words(error: Mapping[str, Any], known: Iterable[str] = ()) -> str:
    """What a config error says of one pydantic error (an item of `ValidationError.errors()`):
    pydantic's message; "expected a table" for a value where a table belongs (pydantic's words
    there name a model class); "unknown key" for a key its table does not have, with the key of
    `known` (the names that table takes) closest to it, `unknown key; did you mean
    'allowed_users'?` (pydantic's "Extra inputs are not permitted" names neither, and a misspelt
    key is the likeliest cause, docs/configuration.md §1); for a validator's own ValueError, its
    text without pydantic's "Value error, " in front (the library's label, not ours). Shared
    with the platform tables' errors (`plugin_system.settings`)."""
    if error.get("type") in _TABLE_EXPECTED:
        return "expected a table"
    if error.get("type") == "extra_forbidden":
        loc = error.get("loc") or ("",)
        # A misspelling, not any related name: `session_resets` is not `session_store_max_age_days`.
        close = difflib.get_close_matches(str(loc[-1]), sorted(known), n=1, cutoff=0.75)
        return "unknown key" + (f"; did you mean {close[0]!r}?" if close else "")
    if error.get("type") == "value_error" and (ctx := error.get("ctx") or {}).get("error") is not None:
        return str(ctx["error"])
    return error.get("msg", "invalid")


def _describe_validation_error(err: ValidationError, overrides: Mapping[str, Any], toml_path: Path) -> str:
    errors = err.errors()
    first = errors[0]
    path = _error_key_path(first)
    key = ".".join(path) or ".".join(str(p) for p in first.get("loc", ())) or "<root>"
    table = _setting_type(path[:-1]) if path[:-1] else GatewayConfig
    message = error_words(first, getattr(table, "model_fields", ()) if isinstance(table, type) else ())
    value = first.get("input")
    # The value is echoed only when it cannot be a secret: never for a secret-looking key or
    # value, nor for a table that got a scalar (a token put at HERMES_PLATFORMS__TELEGRAM).
    if (isinstance(value, (str, int, float, bool)) and first.get("type") not in _VALUE_NOT_SHOWN
            and not any(word in key.lower() for word in _SECRET_WORDS) and not _looks_like_secret(value)):
        shown = repr(value)
        message += f", got {shown if len(shown) <= 60 else shown[:57] + '...'}"
    others = len({".".join(_error_key_path(e)) for e in errors[1:]} - {".".join(path)})
    more = f"; {others} more invalid key(s)" if others else ""
    text = f"invalid config value for {key!r}: {message} ({describe_value_source(path, overrides, toml_path)}){more}"
    return " ".join(text.split())


# pydantic-settings' words for a variable it had to read as JSON and could not.
_UNDECODABLE = re.compile(r'error parsing value for field "(?P<field>\w+)" from source "(?P<source>\w+)"')


def _shape_of(annotation: Any) -> str | None:
    """`"table"` or `"list"` when a variable for a setting of type `annotation` must be JSON
    (pydantic-settings decodes those), None for a plain value."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    for member in typing.get_args(annotation) if union else (annotation,):
        origin = typing.get_origin(member) or member
        if origin is dict or (isinstance(member, type) and issubclass(member, BaseModel)):
            return "table"
        if origin in (list, tuple, set, frozenset):
            return "list"
    return None


def _setting_type(path: list[str]) -> Any:
    """The type annotation of config key `path` (lower-case names), or None when unknown."""
    model: Any = GatewayConfig
    annotation: Any = None
    for part in path:
        fields = getattr(model, "model_fields", None) if isinstance(model, type) else None
        if not fields or part not in fields:
            return None
        annotation = fields[part].annotation
        model = annotation
    return annotation


def _is_json(text: str | None) -> bool:
    try:
        json.loads(text or "")
    except ValueError:
        return False
    return True


def _describe_settings_error(err: SettingsError) -> str:
    """pydantic-settings' error for a HERMES_* variable (environment or .env) of a table or a
    list that is not valid JSON (`HERMES_AGENT__OPENAI=abc`): one line naming the key, the
    shape expected and the variable, never the value (it may be a token put in the wrong place)."""
    match = _UNDECODABLE.search(str(err))
    if match is None:
        return f"the config cannot be loaded: {' '.join(str(err).split())}"
    dotenv = _dotenv_values() if match["source"].startswith("DotEnv") else None
    environ = dotenv[1] if dotenv is not None else os.environ
    for name in sorted(environ):
        path = str(name).lower().removeprefix("hermes_").split("__")
        if (not str(name).lower().startswith("hermes_") or path[0] != match["field"].lower()
                or _is_plugin_allowlist(name, environ[name]) or _is_json(environ[name])):
            continue
        shape = _shape_of(_setting_type(path))
        if shape is None:
            continue
        expected = ('a table: a JSON object ({"<key>": <value>, …}) or one variable per key '
                    f"({name}__<KEY>)" if shape == "table" else 'a list: a JSON array (["…", "…"])')
        source = f".env file {dotenv[0]} ({name})" if dotenv is not None else f"environment variable {name}"
        return f"invalid config value for {'.'.join(path)!r}: expected {expected}; the value is not valid JSON ({source})"
    where = f".env file {dotenv[0]}" if dotenv is not None else "HERMES_* environment variables"
    return f"invalid config value for {match['field']!r}: a variable for it is not valid JSON ({where})"


def load_config(**overrides: Any) -> GatewayConfig:
    """Load the gateway config, turning every failure into a one-line `ConfigError`.

    This is the one loader behind every start-up and CLI command (`app.load_gateway_config`
    wraps it).

    Args:
        **overrides: keyword overrides, strongest source (e.g. `home=Path(...)`).

    Raises:
        ConfigError: `$HERMES_CONFIG` names a file that does not exist; the config file exists but is not a regular file, cannot be read or is not
            (UTF-8) TOML; or a value is bad: the line names the key and where the value came
            from (keyword argument, environment variable, .env file or config file); a variable
            for a table or a list is not valid JSON (the line names it and the shape expected).
    """
    home = overrides.get("home") or env_home()
    path = config_file_path(home)
    explicit = explicit_config_path()
    if explicit is not None and not explicit.exists():
        # Named on purpose: running on defaults instead would hide a typo (only the default
        # `$HERMES_HOME/hermes.toml` may be absent).
        raise ConfigError(f"config file {explicit} (HERMES_CONFIG) does not exist")
    if path.exists() and not path.is_file():
        # pydantic-settings would silently skip it: say so instead of running on defaults.
        raise ConfigError(f"config file {path} cannot be read: it is not a regular file")
    try:
        return GatewayConfig(**overrides)
    # `from exc`: the one-line message is complete on its own; the chained cause is what a
    # debug traceback (HERMES_DEBUG=1) shows.
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}{_bom_note(path)}") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        if _is_utf8(path):  # the config file decodes (or there is none): it was the .env file
            dotenv = (_dotenv_path() or Path(".env")).resolve()
            raise ConfigError(f".env file {dotenv} is not valid UTF-8: {exc.reason} at byte {exc.start}") from exc
        raise ConfigError(f"config file {path} is not valid UTF-8 TOML: {exc.reason} at byte {exc.start}") from exc
    except ValidationError as exc:
        raise ConfigError(_describe_validation_error(exc, overrides, path)) from exc
    except SettingsError as exc:
        raise ConfigError(_describe_settings_error(exc)) from exc


def unused_setting_warnings(config: GatewayConfig) -> list[str]:
    """Warning lines for settings that load but do nothing: a `[store] dsn` while `[store]
    backend` is `sqlite` (a replica set configured with only `HERMES_STORE__DSN` would run each
    replica on its own state.db, the conversations forked, docs/configuration.md §2). The CLI
    prints them when it loads the config (`cli.common.load_cli_config`)."""
    dsn = config.store.dsn
    if config.store.builtin and dsn is not None and dsn.get_secret_value().strip():
        return ['[store] dsn is set but [store] backend is "sqlite": the dsn is not used and this gateway keeps '
                'its own state.db (set [store] backend = "postgres" to share a PostgreSQL store)']
    return []


def legacy_setting_warnings(config: GatewayConfig) -> list[str]:
    """The warning line for the session-reset timer settings of upstream gateways the config
    holds (`session_reset`, `default_reset_policy`, `reset_by_type`, `reset_by_platform`): they
    load and are ignored, since no timer ends a conversation here (docs/configuration.md §1,
    docs/behaviour.md §8). The CLI prints it when it loads the config (`cli.common.load_cli_config`)."""
    if not config._ignored_legacy:
        return []
    return [f"ignored legacy session-reset timer setting(s) {', '.join(config._ignored_legacy)}: no timer ends a "
            "conversation here, /new and /reset do (docs/behaviour.md §8)"]


def unknown_env_section_warnings() -> list[str]:
    """One warning line per `HERMES_<NAME>__…` variable (environment or `.env`) whose `<NAME>` is
    no setting: pydantic-settings reads only the names it knows, so a typo in a section
    (`HERMES_AGNET__BACKEND`) would silently leave that setting at its default. Variables without
    `__` are left alone: `HERMES_HOME`, `HERMES_CONFIG`, `HERMES_PLUGINS` and others are not
    settings. The CLI prints them when it loads the config (`cli.common.load_cli_config`)."""
    prefix = str(GatewayConfig.model_config.get("env_prefix", ""))
    known = set(GatewayConfig.model_fields)
    dotenv = _dotenv_values()
    names = set(os.environ) | set(dotenv[1] if dotenv is not None else ())
    lines = []
    for name in sorted(names):
        if not name.upper().startswith(prefix) or "__" not in name[len(prefix):]:
            continue
        section = name[len(prefix):].split("__", 1)[0].lower()
        if section in known:
            continue
        close = difflib.get_close_matches(section, sorted(known), n=1)
        hint = f" (did you mean {prefix}{close[0].upper()}__…?)" if close else ""
        lines.append(f"environment variable {name} sets nothing: there is no setting {section!r}{hint}")
    return lines
