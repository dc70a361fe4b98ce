"""Config errors name the key and the real source of the bad value (bad input gets
one clear line; docs/architecture.md §5 source order)."""

from __future__ import annotations

import pytest

from hermes_core.settings import ConfigError, load_config


@pytest.fixture
def home(tmp_path, monkeypatch):
    for name in list(__import__("os").environ):
        if name.upper().startswith("HERMES_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no stray .env
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


def _error(**overrides) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(**overrides)
    return str(info.value)


def test_bad_env_value_names_the_variable_not_a_missing_file(home, monkeypatch):
    monkeypatch.setenv("HERMES_AGENT__GATEWAY_TIMEOUT", "abc")
    assert _error() == (
        "invalid config value for 'agent.gateway_timeout': Input should be a valid integer, unable to "
        "parse string as an integer, got 'abc' (environment variable HERMES_AGENT__GATEWAY_TIMEOUT)")


def test_bad_nested_env_value_drops_pydantic_union_tags(home, monkeypatch):
    monkeypatch.setenv("HERMES_AGENT__AGENT_CACHE__MEMORY_HIGH_MB", "lots")
    text = _error()
    assert text.startswith("invalid config value for 'agent.agent_cache.memory_high_mb': ")
    assert text.endswith(", got 'lots' (environment variable HERMES_AGENT__AGENT_CACHE__MEMORY_HIGH_MB)")


@pytest.mark.parametrize("key", ["gateway_timeout", "Gateway_Timeout"])  # read case-insensitively
def test_json_env_table_is_named(home, monkeypatch, key):
    monkeypatch.setenv("HERMES_AGENT", f'{{"{key}": -1}}')
    assert _error() == ("invalid config value for 'agent.gateway_timeout': Input should be greater than 0, "
                        "got -1 (environment variable HERMES_AGENT)")


def test_a_json_env_table_without_the_bad_key_leaves_the_blame_with_the_file(home, monkeypatch):
    """The variable's table and the file's are merged: the key only the file sets is the file's."""
    monkeypatch.setenv("HERMES_AGENT", '{"backend": "echo"}')
    (home / "hermes.toml").write_text("[agent]\ngateway_timeout = 0\n")
    assert _error() == ("invalid config value for 'agent.gateway_timeout': Input should be greater than 0, "
                        f"got 0 (config file {home / 'hermes.toml'})")


TABLE_EXPECTED = 'expected a table: a JSON object ({"<key>": <value>, …}) or one variable per key'


@pytest.mark.parametrize(("variable", "key"), [("HERMES_AGENT__OPENAI", "agent.openai"), ("HERMES_AGENT", "agent"),
                                               ("HERMES_PLATFORMS", "platforms")])
def test_a_plain_value_for_a_table_names_the_variable_and_the_shape(home, monkeypatch, variable, key):
    # No config file exists: the line must not name one.
    monkeypatch.setenv(variable, "abc")
    assert _error() == (f"invalid config value for {key!r}: {TABLE_EXPECTED} ({variable}__<KEY>); "
                        f"the value is not valid JSON (environment variable {variable})")


def test_a_plain_value_for_a_list_names_the_variable_and_the_shape(home, monkeypatch):
    monkeypatch.setenv("HERMES_PLUGINS", "telegram,slack")  # the loader's allowlist: not the culprit
    monkeypatch.setenv("HERMES_PLUGINS__ENABLED", "telegram,slack")
    assert _error() == ("invalid config value for 'plugins.enabled': expected a list: a JSON array "
                        '(["…", "…"]); the value is not valid JSON (environment variable HERMES_PLUGINS__ENABLED)')


def test_a_plain_value_for_a_table_in_dotenv_names_the_file(home, tmp_path):
    (tmp_path / ".env").write_text(f"HERMES_AGENT__OPENAI={TOKEN}\n")
    text = _error()
    assert text == (f"invalid config value for 'agent.openai': {TABLE_EXPECTED} (HERMES_AGENT__OPENAI__<KEY>); "
                    f"the value is not valid JSON (.env file {tmp_path / '.env'} (HERMES_AGENT__OPENAI))")


def test_bad_file_value_names_the_file(home):
    (home / "hermes.toml").write_text('[agent]\ngateway_timeout = "soon"\n')
    assert _error() == (
        "invalid config value for 'agent.gateway_timeout': Input should be a valid integer, unable to "
        f"parse string as an integer, got 'soon' (config file {home / 'hermes.toml'})")


def test_unknown_key_in_file(home):
    # docs/configuration.md §1: an unknown key is named, with the table's key closest to it.
    (home / "hermes.toml").write_text("[storage]\nmirror_debounce = 1\n")
    assert _error() == ("invalid config value for 'storage.mirror_debounce': unknown key; did you mean "
                        f"'mirror_debounce_s'? (config file {home / 'hermes.toml'})")


def test_a_misspelt_top_level_key_is_named_with_the_key_meant(home):
    (home / "hermes.toml").write_text("group_session_per_user = false\n")
    assert _error() == ("invalid config value for 'group_session_per_user': unknown key; did you mean "
                        f"'group_sessions_per_user'? (config file {home / 'hermes.toml'})")


def test_an_unknown_key_like_no_setting_gets_no_guess(home, monkeypatch):
    monkeypatch.setenv("HERMES_AGENT", '{"zzzz": 1}')
    assert _error() == "invalid config value for 'agent.zzzz': unknown key (environment variable HERMES_AGENT)"


def test_env_beats_file_and_is_named(home, monkeypatch):
    # the file's value is fine; the environment overrides it with a bad one
    (home / "hermes.toml").write_text("[agent]\ngateway_timeout = 60\n")
    monkeypatch.setenv("HERMES_AGENT__GATEWAY_TIMEOUT", "0")
    assert _error().endswith("got '0' (environment variable HERMES_AGENT__GATEWAY_TIMEOUT)")


def test_bad_keyword_names_the_keyword(home, monkeypatch):
    monkeypatch.setenv("HERMES_AGENT__GATEWAY_TIMEOUT", "abc")  # also bad, but the keyword wins
    assert _error(agent={"gateway_timeout": "z", "backend": "echo"}) == (
        "invalid config value for 'agent.gateway_timeout': Input should be a valid integer, unable to "
        "parse string as an integer, got 'z' (keyword argument 'agent')")
    monkeypatch.delenv("HERMES_AGENT__GATEWAY_TIMEOUT")
    assert _error(core={"max_input_chars": 0}) == (
        "invalid config value for 'core.max_input_chars': Input should be greater than or equal to 1, "
        "got 0 (keyword argument 'core')")


def test_dotenv_value_names_the_file(home, tmp_path):
    (tmp_path / ".env").write_text("HERMES_STORAGE__BUSY_TIMEOUT_S=never\n")
    assert _error() == (
        "invalid config value for 'storage.busy_timeout_s': Input should be a valid number, unable to "
        f"parse string as a number, got 'never' (.env file {tmp_path / '.env'} (HERMES_STORAGE__BUSY_TIMEOUT_S))")


def test_secret_values_are_not_echoed(home, monkeypatch):
    (home / "hermes.toml").write_text("[agent.openai]\napi_key = 12\n")
    text = _error()
    assert text.startswith("invalid config value for 'agent.openai.api_key': ")
    assert "12" not in text.split(": ", 1)[1].replace(str(home), "")


def test_directory_named_hermes_toml_is_refused(home):
    (home / "hermes.toml").mkdir()
    assert _error() == f"config file {home / 'hermes.toml'} cannot be read: it is not a regular file"


def test_a_byte_order_mark_is_named_in_the_toml_error(home):
    """TOML forbids a BOM, and the parser's words point at line 1, column 1 only: the error says
    what is there and what to do."""
    (home / "hermes.toml").write_bytes(b"\xef\xbb\xbf[core]\nmax_input_chars = 100\n")
    assert _error() == (f"config file {home / 'hermes.toml'} is not valid TOML: Invalid statement (at line 1, "
                        "column 1); the file starts with a UTF-8 byte order mark (BOM): save it as UTF-8 without one")
    (home / "hermes.toml").write_bytes(b"[core]\nmax_input_chars = \n")  # no BOM: the parser's words alone
    assert _error() == (f"config file {home / 'hermes.toml'} is not valid TOML: Invalid value (at line 2, "
                        "column 19)")


def test_one_line_even_with_several_bad_keys(home, monkeypatch):
    monkeypatch.setenv("HERMES_AGENT__GATEWAY_TIMEOUT", "abc")
    monkeypatch.setenv("HERMES_CORE__MAX_INPUT_CHARS", "many")
    text = _error()
    assert "\n" not in text
    assert text.endswith("; 1 more invalid key(s)")


TOKEN = "123456:ABCdefGHIjklMNOpqrSTUvwxYZ012345678"


def test_a_token_put_where_a_table_belongs_is_never_echoed(home, monkeypatch):
    """docs/configuration.md: a config error names the key and where it came from, never a
    secret-looking value (the bot token put in HERMES_PLATFORMS__TELEGRAM instead of
    …__BOT_TOKEN)."""
    monkeypatch.setenv("HERMES_PLATFORMS__TELEGRAM", TOKEN)
    assert _error() == ("invalid config value for 'platforms.telegram': expected a table "
                        "(environment variable HERMES_PLATFORMS__TELEGRAM)")


@pytest.mark.parametrize("value", [TOKEN, "xoxb-1234-5678-abcdefghijkl", "sk-proj-abcdefgh1234",
                                   "a1b2c3d4e5f6g7h8i9j0k1l2"])
def test_a_secret_looking_value_is_not_echoed_under_any_key(home, monkeypatch, value):
    monkeypatch.setenv("HERMES_AGENT__GATEWAY_TIMEOUT", value)
    assert _error() == ("invalid config value for 'agent.gateway_timeout': Input should be a valid integer, "
                        "unable to parse string as an integer (environment variable HERMES_AGENT__GATEWAY_TIMEOUT)")


@pytest.mark.parametrize("toml, key", [
    ("session_store_max_age_days = true\n", "session_store_max_age_days"),
    ("[agent.agent_cache]\nmax_size = true\n", "agent.agent_cache.max_size"),
    ("[agent]\ngateway_timeout = false\n", "agent.gateway_timeout"),
    ("[agent.agent_cache]\nmemory_high_mb = true\n", "agent.agent_cache.memory_high_mb"),
])
def test_integer_settings_refuse_booleans(home, toml, key):
    """docs/configuration.md: `true` is not 1."""
    (home / "hermes.toml").write_text(toml)
    value = "True" if "true" in toml else "False"
    assert _error() == (f"invalid config value for {key!r}: Input should be a valid integer, not a boolean, "
                        f"got {value} (config file {home / 'hermes.toml'})")


def test_number_settings_refuse_booleans_but_still_parse_text(home, monkeypatch):
    (home / "hermes.toml").write_text("[storage]\nbusy_timeout_s = true\n")
    assert _error().startswith("invalid config value for 'storage.busy_timeout_s': Input should be a valid "
                               "number, not a boolean, got True")
    (home / "hermes.toml").write_text("")
    monkeypatch.setenv("HERMES_AGENT__AGENT_CACHE__MAX_SIZE", "64")
    monkeypatch.setenv("HERMES_SESSION_STORE_MAX_AGE_DAYS", "7")
    config = load_config()
    assert (config.agent.agent_cache.max_size, config.session_store_max_age_days) == (64, 7)


def test_a_plugin_platform_setting_refuses_a_boolean_for_an_integer():
    from pydantic import ValidationError

    from hermes_core.sdk import PlatformSettings

    class Settings(PlatformSettings):
        max_chunks: int = 3

    with pytest.raises(ValidationError, match="Input should be a valid integer, not a boolean"):
        Settings(max_chunks=True)
    assert Settings(max_chunks=5, enabled=True).max_chunks == 5


@pytest.mark.parametrize("toml, key, shown", [
    ("[scheduler]\ntick_timeout_s = inf\n", "scheduler.tick_timeout_s", "inf"),
    ("[storage]\nbusy_timeout_s = inf\n", "storage.busy_timeout_s", "inf"),
    ("[status]\ninterval_s = 1e400\n", "status.interval_s", "inf"),
    ("[agent.openai]\nrequest_timeout_s = inf\n", "agent.openai.request_timeout_s", "inf"),
])
def test_number_settings_refuse_an_endless_value(home, toml, key, shown):
    """docs/configuration.md: every config error names the key. `inf` passed `gt=0`; then
    `[scheduler] interval_s = inf` stopped start-up with 'cannot start: cannot convert float
    infinity to integer', naming nothing."""
    (home / "hermes.toml").write_text(toml)
    assert _error() == (f"invalid config value for {key!r}: Input should be a finite number, "
                        f"got {shown} (config file {home / 'hermes.toml'})")


def test_number_settings_refuse_an_endless_value_from_the_environment(home, monkeypatch):
    monkeypatch.setenv("HERMES_SCHEDULER__DRAIN_TIMEOUT_S", "inf")
    assert _error() == ("invalid config value for 'scheduler.drain_timeout_s': Input should be a finite "
                        "number, got 'inf' (environment variable HERMES_SCHEDULER__DRAIN_TIMEOUT_S)")


def test_gc_threshold_past_a_c_int_names_the_key(home):
    """`gc.set_threshold` takes a C int: a larger `[core] gc_young_threshold` stopped start-up
    with 'cannot start: Python int too large to convert to C long', naming no key."""
    (home / "hermes.toml").write_text("[core]\ngc_young_threshold = 99999999999999999999999\n")
    assert _error() == ("invalid config value for 'core.gc_young_threshold': Input should be less than or "
                        f"equal to 2147483647, got 99999999999999999999999 (config file {home / 'hermes.toml'})")
    (home / "hermes.toml").write_text("[core]\ngc_young_threshold = 2147483647\n")
    assert load_config().core.gc_young_threshold == 2147483647


@pytest.mark.parametrize("key", ["interval_s", "jitter_s"])
def test_scheduler_intervals_past_a_year_name_the_key(home, key):
    """A watcher tick 1e12 s away stopped start-up with 'cannot start: date value out of range'
    (interval_s) or failed in the scheduler with a ValueError on the terminal (jitter_s)."""
    (home / "hermes.toml").write_text(f"[scheduler]\n{key} = 1e12\n")
    assert _error() == (f"invalid config value for 'scheduler.{key}': Input should be less than or equal "
                        f"to 31536000, got 1000000000000.0 (config file {home / 'hermes.toml'})")
    (home / "hermes.toml").write_text(f"[scheduler]\n{key} = 31536000\n")
    assert getattr(load_config().scheduler, key) == 31536000


@pytest.mark.parametrize("where", ["env", "file"])
def test_an_empty_db_path_is_the_default_not_the_current_directory(home, monkeypatch, where):
    """`HERMES_CORE__DB_PATH=` became Path(""), the current directory: SQLite cannot open it,
    so every start ran degraded ("state.db . cannot be opened")."""
    if where == "env":
        monkeypatch.setenv("HERMES_CORE__DB_PATH", "")
    else:
        (home / "hermes.toml").write_text('[core]\ndb_path = " "\n')
    assert load_config().db_path == home / "state.db"


@pytest.mark.parametrize("value, bound", [("1e308", "less than or equal to 31536000, got 1e+308"),
                                          ("0.001", "greater than or equal to 1, got 0.001")])
def test_a_store_lease_outside_a_second_to_a_year_names_the_key(home, value, bound):
    """`[store] lease_ttl_s = 1e308` overflowed PostgreSQL's interval at every replica sweep
    (nothing was answered); 0.001 ran out before the write that took the lease."""
    (home / "hermes.toml").write_text(f"[store]\nlease_ttl_s = {value}\n")
    assert _error() == (f"invalid config value for 'store.lease_ttl_s': Input should be {bound} "
                        f"(config file {home / 'hermes.toml'})")
    (home / "hermes.toml").write_text("[store]\nlease_ttl_s = 31536000\n")
    assert load_config().store.lease_ttl_s == 31536000


def test_a_plugin_platform_setting_refuses_an_endless_number():
    from pydantic import ValidationError

    from hermes_core.sdk import PlatformSettings

    class Settings(PlatformSettings):
        max_retry_after: float = 60.0

    with pytest.raises(ValidationError, match="Input should be a finite number"):
        Settings(max_retry_after=float("inf"))
    assert Settings(max_retry_after=1.5).max_retry_after == 1.5


def test_legacy_timer_keys_are_ignored_with_one_warning(home, caplog):
    """docs/behaviour.md §13 (seed §6): upstream's idle/daily reset settings load, are ignored and
    named in one warning line, which the CLI prints (docs/configuration.md §1); loading logs nothing."""
    import logging

    from hermes_core.settings import legacy_setting_warnings

    (home / "hermes.toml").write_text(
        '[session_reset]\nmode = "both"\nat_hour = 4\nidle_minutes = 1440\n'
        '[reset_by_platform.telegram]\nmode = "idle"\nidle_minutes = 240\n'
        '[reset_by_type.dm]\nmode = "daily"\n')
    with caplog.at_level(logging.WARNING, logger="hermes_core.settings"):
        config = load_config()
    assert config.session_store_max_age_days == 0
    assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.settings"] == []
    assert legacy_setting_warnings(config.model_copy()) == [
        "ignored legacy session-reset timer setting(s) reset_by_platform.telegram, reset_by_type.dm, "
        "session_reset.at_hour, session_reset.idle_minutes, session_reset.mode: no timer ends a "
        "conversation here, /new and /reset do (docs/behaviour.md §8)"]


def test_a_variable_for_a_section_that_does_not_exist_is_named(home, monkeypatch):
    """docs/configuration.md §1: HERMES_<SECTION>__<KEY> sets a key of a section; a typo in the
    section name is named (the CLI prints it as a warning) instead of silently leaving the
    setting at its default."""
    from hermes_core.settings import unknown_env_section_warnings

    monkeypatch.setenv("HERMES_AGNET__BACKEND", "openai")
    monkeypatch.setenv("HERMES_AGENT__GATEWAY_TIMEOUT", "60")  # a real section: not named
    monkeypatch.setenv("HERMES_ZZZ__X", "1")  # nothing close: no hint
    config = load_config()
    assert (config.agent.backend, config.agent.gateway_timeout) == ("echo", 60)
    assert unknown_env_section_warnings() == [
        "environment variable HERMES_AGNET__BACKEND sets nothing: there is no setting 'agnet' "
        "(did you mean HERMES_AGENT__…?)",
        "environment variable HERMES_ZZZ__X sets nothing: there is no setting 'zzz'"]


def test_other_unknown_keys_are_still_errors(home):
    (home / "hermes.toml").write_text('[session_resets]\nmode = "both"\n')
    assert _error() == ("invalid config value for 'session_resets': unknown key "
                        f"(config file {home / 'hermes.toml'})")
