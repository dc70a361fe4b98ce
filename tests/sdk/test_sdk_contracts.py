"""The test kit's contract suites, run against the core's own components, and proof that they
fail for components that break the contract."""

import asyncio
import contextlib
import io

import pytest

from hermes_core.model.events import MessageEvent
from hermes_core.model.source import SessionSource
from hermes_core.platforms.local import LocalAdapter
from hermes_core.sdk.adapter import SendResult
from hermes_core.testing import (
    AdapterContract,
    CapturingAdapter,
    PluginContract,
    RedactionContract,
    SessionKeyContract,
)
from hermes_core.types import AdapterSpec

# ---- the suites pass for the core's components ----------------------------------------------


class TestCapturingAdapterContract(AdapterContract):
    @pytest.fixture
    def adapter_class(self):
        return CapturingAdapter.with_spec(max_message_length=50, capabilities=frozenset({"threads"}))


class TestLocalAdapterContract(AdapterContract):
    @pytest.fixture
    def adapter_class(self):
        return LocalAdapter

    @pytest.fixture
    def adapter(self, adapter_class):
        return LocalAdapter(stdin=io.StringIO(""), stdout=io.StringIO(), user="tester")

    def sent_texts(self, adapter, fake_transport):
        return adapter.stdout.getvalue().splitlines()


@pytest.mark.parametrize("platform_id", ["telegram", "discord", "slack", "whatsapp", "signal"])
class TestBuiltinSessionKeys(SessionKeyContract):
    @pytest.fixture
    def platform(self, platform_id):
        return platform_id


@pytest.mark.parametrize("platform_id", ["telegram", "discord", "slack", "whatsapp", "signal"])
class TestBuiltinRedaction(RedactionContract):
    @pytest.fixture
    def platform(self, platform_id):
        return platform_id


GOOD_PLUGIN = """
from pydantic import BaseModel, ConfigDict, SecretStr
from hermes_core import SettingsSpec, hookimpl
HERMES_API = 1

class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bot_token: SecretStr | None = None

@hookimpl
def hermes_settings_schema():
    return [SettingsSpec(section="kitdemo", model=Settings)]
"""


class TestEntryPointPluginContract(PluginContract):
    @pytest.fixture
    def plugin_name(self, plugin_distributions):
        plugin_distributions.add("hermes-gateway-kitdemo",
                                 modules={"kitdemo_pkg/__init__.py": "", "kitdemo_pkg/hooks.py": GOOD_PLUGIN},
                                 entry_points={"hermes_core.plugins": {"kitdemo": "kitdemo_pkg.hooks"}})
        return "kitdemo"


# ---- the suites catch broken components -----------------------------------------------------


class NoSplitAdapter(CapturingAdapter):
    """Breaks the contract: an empty label, an unknown capability, and a `send` that merges texts."""

    spec = AdapterSpec(name="nosplit", label="", max_message_length=20, capabilities=frozenset({"telepathy"}))

    async def send(self, target, text, *, reply_to=None, metadata=None):
        if self.sent:
            return SendResult(None)  # drops every chunk after the first
        return await super().send(target, text, reply_to=reply_to, metadata=metadata)


def test_adapter_contract_rejects_an_incomplete_spec():
    with pytest.raises(AssertionError, match="assert ''"):
        AdapterContract().test_spec_is_complete(NoSplitAdapter)


async def test_adapter_contract_notices_dropped_chunks():
    contract = AdapterContract()
    adapter = NoSplitAdapter()
    target = SessionSource(platform="nosplit", chat_id="100", chat_type="dm", user_id="100")
    with pytest.raises(AssertionError):
        await contract.test_delivery_never_hands_the_adapter_more_than_the_limit(adapter, NoSplitAdapter, None,
                                                                                  target)


class ByteCountingAdapter(CapturingAdapter):
    """Breaks the contract: declares 20 UTF-16 units but re-splits every text at 20 UTF-8 bytes,
    so a chunk holding an emoji (2 units, 4 bytes) that the core sized correctly goes out in two
    messages."""

    spec = AdapterSpec(name="bytecount", label="Byte counting", max_message_length=20, length_unit="utf16")

    async def send(self, target, text, *, reply_to=None, metadata=None):
        data = text.encode("utf-8")
        while len(data) > 20:
            cut = 20
            while (data[cut] & 0xC0) == 0x80:  # do not cut inside a UTF-8 sequence
                cut -= 1
            await super().send(target, data[:cut].decode("utf-8"), reply_to=reply_to, metadata=metadata)
            data = data[cut:]
        return await super().send(target, data.decode("utf-8"), reply_to=reply_to, metadata=metadata)


class FooterAdapter(CapturingAdapter):
    """Breaks the contract: appends a signature, so a chunk at the limit goes out over it."""

    spec = AdapterSpec(name="footer", label="Footer", max_message_length=30, length_unit="chars")

    async def send(self, target, text, *, reply_to=None, metadata=None):
        return await super().send(target, text + " -- bot", reply_to=reply_to, metadata=metadata)


@pytest.mark.parametrize("broken", [ByteCountingAdapter, FooterAdapter])
async def test_adapter_contract_catches_an_adapter_that_does_not_send_a_limit_sized_chunk_whole(broken):
    target = SessionSource(platform=broken.spec.name, chat_id="100", chat_type="dm", user_id="100")
    with pytest.raises(AssertionError, match=f"a chunk of exactly {broken.spec.max_message_length} "
                                             f"{broken.spec.length_unit} was not sent whole"):
        await AdapterContract().test_send_accepts_a_chunk_of_exactly_the_limit(broken(), broken, None, target)


async def test_the_limit_sized_chunk_of_the_contract_is_what_the_good_adapter_received():
    # The same check passes for a correct adapter with the same spec, and what it sent is the
    # literal limit-sized text: 20 UTF-16 units with one emoji counted as 2.
    good = CapturingAdapter.with_spec(name="bytecount", max_message_length=20, length_unit="utf16")
    adapter = good()
    target = SessionSource(platform="bytecount", chat_id="100", chat_type="dm", user_id="100")
    await AdapterContract().test_send_accepts_a_chunk_of_exactly_the_limit(adapter, good, None, target)
    assert adapter.texts() == ["hermes \N{GRINNING FACE} caf\N{LATIN SMALL LETTER E WITH ACUTE}xxxxxx"]


def test_exact_length_text_measures_exactly_the_limit_in_each_unit():
    from hermes_core.testing.contract import exact_length_text

    assert exact_length_text(20, "chars") == "hermes \N{GRINNING FACE} caf\N{LATIN SMALL LETTER E WITH ACUTE}xxxxxxx"
    assert exact_length_text(20, "bytes") == "hermes \N{GRINNING FACE} caf\N{LATIN SMALL LETTER E WITH ACUTE}xxx"
    assert exact_length_text(1, "utf16") == "x"
    with pytest.raises(ValueError, match="limit must be positive, got 0"):
        exact_length_text(0, "chars")


def test_adapter_contract_requires_methods_of_declared_capabilities():
    editing = CapturingAdapter.with_spec(name="editing", capabilities=frozenset({"edit"}))
    with pytest.raises(AssertionError, match="capability 'edit' needs an async edit_message"):
        AdapterContract().test_declared_capability_has_its_method(editing, "edit")


class LeakyRules:
    """Replaces the pseudonymiser with the identity: the raw id would reach the prompt."""

    from hermes_core.markers import hookimpl as _hookimpl

    @_hookimpl
    def hermes_pseudonymize(self, platform, kind, value):
        return value


def test_redaction_contract_catches_an_identity_pseudonymiser():
    from hermes_core.plugin_system import create_plugin_manager

    pm, _ = create_plugin_manager(None)
    pm.register(LeakyRules(), name="leaky")
    with pytest.raises(AssertionError):
        RedactionContract().test_pseudonyms_are_deterministic_and_stable(pm, LeakyRules(), "telegram")


class PerUserDmKeys:
    """Breaks the isolation rule: groups keyed without the participant but reported not shared."""

    from hermes_core.markers import hookimpl as _hookimpl

    @_hookimpl
    def hermes_session_key(self, source, policy):
        return f"agent:main:{source.platform}:{source.chat_type}:{source.chat_id}"


def test_session_key_contract_catches_a_key_that_disagrees_with_the_predicate():
    from hermes_core.plugin_system import create_plugin_manager

    pm, _ = create_plugin_manager(None)
    pm.register(PerUserDmKeys(), name="bad-keys")
    with pytest.raises(AssertionError):
        SessionKeyContract().test_key_and_shared_predicate_agree(pm, "acme")


BAD_SETTINGS_PLUGIN = """
from pydantic import BaseModel
from hermes_core import SettingsSpec, hookimpl
HERMES_API = 1

class Settings(BaseModel):
    bot_token: str = ""

@hookimpl
def hermes_settings_schema():
    return [SettingsSpec(section="leaky", model=Settings)]
"""


def test_plugin_contract_catches_a_plain_str_token_and_extra_keys(plugin_distributions):
    plugin_distributions.add("hermes-gateway-leaky",
                             modules={"leaky_pkg/__init__.py": "", "leaky_pkg/hooks.py": BAD_SETTINGS_PLUGIN},
                             entry_points={"hermes_core.plugins": {"leaky": "leaky_pkg.hooks"}})
    from importlib.metadata import entry_points

    module = [ep for ep in entry_points(group="hermes_core.plugins") if ep.name == "leaky"][0].load()
    with pytest.raises(AssertionError, match="must set model_config = ConfigDict\\(extra='forbid'\\)"):
        PluginContract().test_settings_models_forbid_extras_and_hide_secrets("leaky", module)


# ---- acknowledgement only after emit returned ----------------------------------------------------

class RedeliveringPlatform:
    """A fake platform that offers its oldest message until the adapter acknowledges it."""

    def __init__(self):
        self.pending: list[tuple[str, str]] = []
        self.acked: list[str] = []


class PollingAdapter(CapturingAdapter):
    """Polls `platform` and acknowledges a message after `emit` returned (the contract); with
    `ack_first` it acknowledges before emitting (the bug the contract must catch)."""

    spec = AdapterSpec(name="polling", label="Polling", max_message_length=100)
    ack_first = False

    def __init__(self, platform):
        super().__init__()
        self.platform = platform
        self._task = None

    async def start(self):
        await super().start()
        if self._task is None:
            self._task = asyncio.create_task(self._poll())

    async def stop(self):
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await super().stop()

    def _ack(self, message_id):
        self.platform.pending = [p for p in self.platform.pending if p[0] != message_id]
        self.platform.acked.append(message_id)

    async def _poll(self):
        while True:
            if not self.platform.pending:
                await asyncio.sleep(0.005)
                continue
            message_id, text = self.platform.pending[0]
            if self.ack_first:
                self._ack(message_id)
            source = SessionSource(platform="polling", chat_id="100", chat_type="dm", user_id="100")
            try:
                await self.emit(MessageEvent(source=source, text=text, message_id=message_id))
            except Exception:
                await asyncio.sleep(0.005)  # offered again: it is still pending
                continue
            if not self.ack_first:
                self._ack(message_id)


class PollingContract(AdapterContract):
    ACK_STEP_TIMEOUT_S = 2.0

    async def deliver_inbound(self, adapter, fake_transport, text):
        fake_transport.pending.append(("m1", text))

    def acknowledged(self, adapter, fake_transport):
        return "m1" in fake_transport.acked


async def test_ack_contract_passes_for_an_adapter_that_acknowledges_after_emit():
    platform = RedeliveringPlatform()
    await PollingContract().test_acknowledges_only_after_emit_returned(PollingAdapter(platform), platform)
    assert platform.acked == ["m1"]


async def test_ack_contract_catches_an_adapter_that_acknowledges_first():
    class AckFirst(PollingAdapter):
        ack_first = True

    platform = RedeliveringPlatform()
    with pytest.raises(AssertionError, match="the adapter acknowledged a message the gateway refused"):
        await PollingContract().test_acknowledges_only_after_emit_returned(AckFirst(platform), platform)
