"""Per-plugin settings (docs/architecture.md §5): validated into the plugin's own model."""

import json
import logging

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr

from hermes_core.markers import hookimpl
from hermes_core.plugin_system import PluginSettingsError, create_plugin_manager, validate_plugin_settings
from hermes_core.plugin_system.settings import common_platform_settings
from hermes_core.sdk import PlatformSettings
from hermes_core.settings import GatewayConfig, load_config
from hermes_core.types import SettingsSpec


class AcmeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bot_token: SecretStr
    reply_in_thread: bool = True


class AcmePlugin:
    @hookimpl
    def hermes_settings_schema(self):
        return [SettingsSpec(section="acme", model=AcmeSettings)]


def _pm_with(*plugins):
    pm, _ = create_plugin_manager(None)
    for index, plugin in enumerate(plugins):
        pm.register(plugin, name=f"p{index}")
    return pm


def _config(tmp_path, platforms):
    return GatewayConfig(home=tmp_path, platforms=platforms)


def test_hook_hermes_settings_schema(tmp_path):
    pm = _pm_with(AcmePlugin())
    config = _config(tmp_path, {"acme": {"enabled": True, "adapter": "x.y:Z", "bot_token": "123:SECRET"}})
    models = validate_plugin_settings(pm, config, installed_adapters=["acme"])
    acme = models["acme"]
    assert isinstance(acme, AcmeSettings)
    assert acme.bot_token.get_secret_value() == "123:SECRET"
    assert acme.reply_in_thread is True
    assert "SECRET" not in repr(acme) and "SECRET" not in str(acme)


def test_unknown_key_is_rejected_naming_section_and_key_not_value(tmp_path):
    pm = _pm_with(AcmePlugin())
    table = {"enabled": True, "bot_token": "123:SECRET", "reply_in_thred": "TOPSECRETVALUE"}
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(pm, _config(tmp_path, {"acme": table}), installed_adapters=["acme"])
    message = str(info.value)
    assert message == "invalid settings in [platforms.acme]: reply_in_thred: unknown key; did you mean 'reply_in_thread'?"
    assert "TOPSECRETVALUE" not in message and "SECRET" not in message


def test_a_misspelt_common_key_is_named_with_the_common_key_meant(tmp_path):
    # docs/configuration.md §1: the guess comes from every key the table takes, the common
    # platform keys (allowed_users, …) as well as the plugin's own.
    pm = _pm_with(AcmePlugin())
    table = {"enabled": True, "bot_token": "123:SECRET", "allowed_user": [111222333]}
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(pm, _config(tmp_path, {"acme": table}), installed_adapters=["acme"])
    assert str(info.value) == "invalid settings in [platforms.acme]: allowed_user: unknown key; did you mean 'allowed_users'?"


def test_invalid_table_of_a_disabled_platform_is_a_warning(tmp_path, caplog):
    pm = _pm_with(AcmePlugin())
    table = {"enabled": False, "bot_token": "123:SECRET", "reply_in_thred": "TOPSECRETVALUE"}
    with caplog.at_level(logging.WARNING):
        models = validate_plugin_settings(pm, _config(tmp_path, {"acme": table}), installed_adapters=["acme"])
    assert "acme" not in models
    assert ("invalid settings in [platforms.acme]: reply_in_thred: unknown key; did you mean 'reply_in_thread'?"
            " (platform disabled; table ignored)") in caplog.text
    assert "SECRET" not in caplog.text


def test_missing_token_is_reported(tmp_path):
    pm = _pm_with(AcmePlugin())
    with pytest.raises(PluginSettingsError, match=r"\[platforms.acme\]: bot_token: Field required"):
        validate_plugin_settings(pm, _config(tmp_path, {"acme": {"enabled": True}}), installed_adapters=["acme"])


def test_duplicate_sections_are_rejected(tmp_path):
    pm = _pm_with(AcmePlugin(), AcmePlugin())
    with pytest.raises(PluginSettingsError, match=r"\[platforms.acme\] is declared by both 'p1' and 'p0'"):
        validate_plugin_settings(pm, _config(tmp_path, {}), installed_adapters=[])


def test_section_of_uninstalled_plugin_warns_or_fails_when_enabled(tmp_path, caplog):
    pm = _pm_with()
    with caplog.at_level(logging.WARNING):
        models = validate_plugin_settings(pm, _config(tmp_path, {"nowhere": {"enabled": False}}),
                                          installed_adapters=[])
    assert models == {}
    assert "[platforms.nowhere] is configured but no installed plugin provides it; ignored" in caplog.text
    with pytest.raises(PluginSettingsError,
                       match=r"\[platforms.nowhere\] is enabled but no installed plugin provides platform 'nowhere'"):
        validate_plugin_settings(pm, _config(tmp_path, {"nowhere": {"enabled": True}}), installed_adapters=[])


def test_misspelt_platform_table_names_the_installed_platforms(tmp_path, caplog):
    """docs/configuration.md §2 `[platforms.<id>]`: a table no installed plugin provides names the
    installed platform ids and, for a typo, the close one (no `pip install` of the typo)."""
    from hermes_core.plugin_system.loader import LoadReport

    installed = ["discord", "local", "telegram"]
    report = LoadReport()
    with caplog.at_level(logging.WARNING):
        validate_plugin_settings(_pm_with(), _config(tmp_path, {"telegrm": {"enabled": False}}),
                                 installed_adapters=installed, report=report)
    line = ("[platforms.telegrm] is configured but no installed plugin provides it; ignored"
            " (installed platforms: discord, local, telegram; did you mean telegram?)")
    assert [r.getMessage() for r in caplog.records] == [line]
    assert report.warnings == [line]  # what doctor shows as a row
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(_pm_with(), _config(tmp_path, {"telegrm": {"enabled": True}}),
                                 installed_adapters=installed)
    assert str(info.value) == ("[platforms.telegrm] is enabled but no installed plugin provides platform"
                               " 'telegrm' (installed platforms: discord, local, telegram; did you mean telegram?)")
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(_pm_with(), _config(tmp_path, {"matrix": {"enabled": True}}),
                                 installed_adapters=installed)
    assert str(info.value) == ("[platforms.matrix] is enabled but no installed plugin provides platform"
                               " 'matrix' (installed platforms: discord, local, telegram; install its package,"
                               " e.g. `pip install hermes-gateway-matrix`)")


def test_adapter_spec_settings_model_is_used_when_no_schema_hook(tmp_path):
    from hermes_core.testing.fakes import CapturingAdapter

    class Tiny(BaseModel):
        model_config = ConfigDict(extra="forbid")
        greeting: str = "hi"

    adapter = CapturingAdapter.with_spec(name="tiny", settings_model=Tiny)
    models = validate_plugin_settings(_pm_with(), _config(tmp_path, {"tiny": {"enabled": True, "greeting": "yo"}}),
                                      adapter_classes={"tiny": adapter}, installed_adapters=["tiny"])
    assert models["tiny"].greeting == "yo"


def test_installed_local_adapter_section_needs_no_model(tmp_path):
    # The core's own `local` adapter entry point is installed; its table has only core keys.
    models = validate_plugin_settings(_pm_with(), _config(tmp_path, {"local": {"enabled": True}}))
    assert models == {}


# ---- the common platform keys (PlatformSettings) ---------------------------------------------

class ZedSettings(PlatformSettings):
    bot_token: SecretStr | None = None


class ZedPlugin:
    @hookimpl
    def hermes_settings_schema(self):
        return [SettingsSpec(section="zed", model=ZedSettings)]


def test_a_platform_settings_subclass_validates_the_common_keys_itself(tmp_path):
    pm = _pm_with(ZedPlugin())
    table = {"enabled": True, "allowed_users": [12345, "67"], "home_channel": -100, "bot_token": "1:X"}
    models = validate_plugin_settings(pm, _config(tmp_path, {"zed": table}), installed_adapters=["zed"])
    zed = models["zed"]
    assert (zed.enabled, zed.allowed_users, zed.home_channel, zed.refusal_notice) == (
        True, ["12345", "67"], "-100", "This assistant is private.")
    common = common_platform_settings(_config(tmp_path, {"zed": table}), models)
    assert common["zed"] is zed


def test_common_keys_are_accepted_beside_a_model_that_does_not_subclass(tmp_path):
    pm = _pm_with(AcmePlugin())
    table = {"enabled": True, "bot_token": "123:SECRET", "allow_all": True, "admin_users": ["9"]}
    config = _config(tmp_path, {"acme": table})
    models = validate_plugin_settings(pm, config, installed_adapters=["acme"])
    assert isinstance(models["acme"], AcmeSettings)
    common = common_platform_settings(config, models)
    assert (common["acme"].allow_all, common["acme"].admin_users, common["acme"].allow_bots) == (True, ["9"], False)


def test_a_bad_common_key_of_an_enabled_platform_is_named(tmp_path):
    pm = _pm_with(AcmePlugin())
    table = {"enabled": True, "bot_token": "123:SECRET", "allow_all": "SOMETIMES"}
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(pm, _config(tmp_path, {"acme": table}), installed_adapters=["acme"])
    assert str(info.value) == ("invalid settings in [platforms.acme]: allow_all: Input should be a valid boolean,"
                               " unable to interpret input")


def test_a_bad_value_from_an_environment_variable_names_the_variable(tmp_path, monkeypatch):
    """docs/configuration.md §1: every config error names the key and where the value came
    from; `[platforms.acme]` alone would send the operator to a table the file does not hold."""
    monkeypatch.setenv("HERMES_PLATFORMS__ACME__ENABLED", "true")
    monkeypatch.setenv("HERMES_PLATFORMS__ACME__BOT_TOKEN", "123:SECRET")
    monkeypatch.setenv("HERMES_PLATFORMS__ACME__ALLOW_ALL", "SOMETIMES")
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(_pm_with(AcmePlugin()), load_config(home=tmp_path), installed_adapters=["acme"])
    assert str(info.value) == ("invalid settings in [platforms.acme]: allow_all: Input should be a valid boolean,"
                               " unable to interpret input (environment variable HERMES_PLATFORMS__ACME__ALLOW_ALL)")
    assert "SECRET" not in str(info.value) and "SOMETIMES" not in str(info.value)


def test_a_bad_key_from_the_config_file_names_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    (tmp_path / "hermes.toml").write_text('[platforms.acme]\nenabled = true\nbot_token = "123:SECRET"\n'
                                         'reply_in_thred = "TOPSECRETVALUE"\n')
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(_pm_with(AcmePlugin()), load_config(home=tmp_path), installed_adapters=["acme"])
    assert str(info.value) == ("invalid settings in [platforms.acme]: reply_in_thred: unknown key; did you mean"
                               f" 'reply_in_thread'? (config file {tmp_path / 'hermes.toml'})")


@pytest.mark.parametrize("variable", ["HERMES_PLATFORMS__ACME", "HERMES_PLATFORMS"])
def test_a_json_variable_that_does_not_set_the_bad_key_is_not_blamed(tmp_path, monkeypatch, variable):
    """docs/configuration.md §1: a JSON-valued table variable and the config file are merged;
    the bad key named in the file is the file's, not the variable's that enabled the table."""
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    enabled = {"enabled": True}
    monkeypatch.setenv(variable, json.dumps(enabled if variable.endswith("ACME") else {"acme": enabled}))
    (tmp_path / "hermes.toml").write_text('[platforms.acme]\nbot_token = "123:SECRET"\nallow_all = "SOMETIMES"\n')
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(_pm_with(AcmePlugin()), load_config(home=tmp_path), installed_adapters=["acme"])
    assert str(info.value) == ("invalid settings in [platforms.acme]: allow_all: Input should be a valid boolean,"
                               f" unable to interpret input (config file {tmp_path / 'hermes.toml'})")


def test_a_json_variable_that_sets_the_bad_key_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    monkeypatch.setenv("HERMES_PLATFORMS__ACME", '{"enabled": true, "allow_all": "SOMETIMES"}')
    (tmp_path / "hermes.toml").write_text('[platforms.acme]\nbot_token = "123:SECRET"\n')
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(_pm_with(AcmePlugin()), load_config(home=tmp_path), installed_adapters=["acme"])
    assert str(info.value) == ("invalid settings in [platforms.acme]: allow_all: Input should be a valid boolean,"
                               " unable to interpret input (environment variable HERMES_PLATFORMS__ACME)")


class AcmeChannel(BaseModel):
    free_response: bool = False


class AcmeChannelsSettings(BaseModel):
    channels: dict[str, AcmeChannel] = {}
    webhook: AcmeChannel = AcmeChannel()


class AcmeChannelsPlugin:
    @hookimpl
    def hermes_settings_schema(self):
        return [SettingsSpec(section="acme", model=AcmeChannelsSettings)]


def test_a_value_where_a_table_belongs_names_the_key_not_the_model_class(tmp_path):
    """docs/configuration.md §1: a value where a table belongs reads "expected a table", as in
    the core's tables; pydantic's own words name the plugin's model class ("… or instance of
    AcmeChannel"), which the operator never wrote (e.g. Slack's `channels.<id> = 5`)."""
    pm = _pm_with(AcmeChannelsPlugin())
    for table, key in (({"channels": {"C1": 5}}, "channels.C1"), ({"webhook": "on"}, "webhook")):
        with pytest.raises(PluginSettingsError) as info:
            validate_plugin_settings(pm, _config(tmp_path, {"acme": {"enabled": True, **table}}),
                                     installed_adapters=["acme"])
        assert str(info.value) == f"invalid settings in [platforms.acme]: {key}: expected a table"


def test_common_keys_of_a_platform_without_a_settings_model_are_not_warned_about(tmp_path, caplog):
    pm = _pm_with()
    config = _config(tmp_path, {"bare": {"enabled": True, "allowed_chats": ["-5"], "colour": "red"}})
    caplog.set_level(logging.WARNING)
    assert validate_plugin_settings(pm, config, installed_adapters=["bare"]) == {}
    assert "[platforms.bare] has keys colour but its plugin declares no settings model; ignored" in caplog.text
    assert common_platform_settings(config, {})["bare"].allowed_chats == ["-5"]
