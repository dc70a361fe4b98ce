"""Contract suites a plugin author subclasses (docs/architecture.md §8; fsspec / langchain-tests style).

The classes are not named `Test*`, so pytest collects them only through a subclass in the
plugin's own tests::

    from hermes_core.testing import AdapterContract, PluginContract, SessionKeyContract

    class TestAcmePlugin(PluginContract):
        @pytest.fixture
        def plugin_name(self):
            return "acme"                      # the hermes_core.plugins entry-point name

    class TestAcmeAdapter(AdapterContract):
        @pytest.fixture
        def adapter_class(self):
            return AcmeAdapter

Everything here runs offline. Pin the kit's minor version in plugin CI (`hermes-gateway-core
>=0.1,<0.2`): new contract tests arrive with minor releases and are announced in the changelog.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import re
from typing import Any

import pytest
from pydantic import BaseModel

from ..keys import KEY_PREFIX
from ..model.events import MessageEvent
from ..model.source import SessionSource
from ..plugin_system.loader import ADAPTERS_GROUP, PLUGINS_GROUP, clear_entry_point_cache
from ..plugin_system.policy import check_plugin_policies, plugin_api_error
from ..plugin_system.report import LOADED
from ..plugin_system.manager import create_plugin_manager, key_policy, session_key_for, session_shared_for
from ..plugin_system.redaction import redact_text
from ..sdk.chunking import measure
from ..sdk.sending import deliver_plan
from ..settings import is_secret_annotation
from ..types import AdapterSpec, KeyPolicy, OutboundDelivery, SettingsSpec
from .fakes import FakeGateway
from .pii_corpus import NON_PII_TEXTS, samples_for

try:  # mark async checks explicitly, so they also run under pytest-asyncio's strict mode
    import pytest_asyncio  # noqa: F401

    _async_test = pytest.mark.asyncio
except ImportError:  # pragma: no cover - without pytest-asyncio the async checks cannot run
    def _async_test(function):
        return pytest.mark.skip(reason="pytest-asyncio is not installed")(function)

SECRET_FIELD = re.compile(r"token|secret|password", re.IGNORECASE)
KNOWN_CAPABILITIES = frozenset({"edit", "threads", "typing", "media", "reactions", "webhook"})
# Capability → coroutine method an adapter declaring it must provide.
CAPABILITY_METHODS = {"edit": "edit_message", "typing": "send_typing", "media": "send_media",
                      "reactions": "react"}


def exact_length_text(limit: int, unit: str) -> str:
    """A text of exactly `limit` units of `unit` (`chars`, `utf16`, `bytes`): words, spaces and
    emoji (1 char, 2 UTF-16 units, 4 UTF-8 bytes), padded with ASCII, with no leading or trailing
    whitespace and no markup characters. Contains at least one emoji when `limit` >= 8.

    Raises:
        ValueError: `limit` < 1 or unknown `unit`.
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    pieces = ("hermes", " ", "\N{GRINNING FACE}", " ", "caf\N{LATIN SMALL LETTER E WITH ACUTE}", " ")
    out: list[str] = []
    used, i = 0, 0
    while True:
        piece = pieces[i % len(pieces)]
        size = measure(piece, unit)
        if used + size > limit - 1:  # keep at least one unit for the final ASCII padding
            break
        out.append(piece)
        used += size
        i += 1
    text = "".join(out).rstrip(" ")
    return text + "x" * (limit - measure(text, unit))


def _entry_point(group: str, name: str) -> importlib.metadata.EntryPoint:
    matches = [ep for ep in importlib.metadata.entry_points(group=group) if ep.name == name]
    assert matches, f"no {group!r} entry point named {name!r} is installed (check pyproject.toml)"
    values = {ep.value for ep in matches}
    assert len(values) == 1, f"{group!r} entry point {name!r} is declared twice: {sorted(values)}"
    return matches[0]


def _plugin_manager_with(plugin: Any, name: str):
    pm, _ = create_plugin_manager(None)
    pm.register(plugin, name=name)
    return pm


# ---- PluginContract --------------------------------------------------------------------------

class PluginContract:
    """Checks a `hermes_core.plugins` entry point.

    Fixture to provide: `plugin_name` (the entry-point name, which is also the platform id).
    """

    @pytest.fixture
    def plugin_name(self) -> str:
        pytest.fail("override the `plugin_name` fixture with your hermes_core.plugins entry-point name")

    @pytest.fixture
    def plugin_module(self, plugin_name):
        return _entry_point(PLUGINS_GROUP, plugin_name).load()

    def test_entry_point_exists_and_loads(self, plugin_name, plugin_module):
        assert plugin_module is not None

    def test_api_version_is_declared_and_compatible(self, plugin_module):
        assert hasattr(plugin_module, "HERMES_API"), "declare `HERMES_API = 1` in the plugin module"
        assert plugin_api_error(plugin_module) is None, plugin_api_error(plugin_module)

    def test_hooks_are_known_and_follow_the_rules(self, plugin_name, plugin_module):
        pm = _plugin_manager_with(plugin_module, plugin_name)
        pm.check_pending()  # raises on a hook name that is not a hermes_core hookspec (typo)
        errors, warnings = check_plugin_policies(pm, plugin_name)
        assert errors == []
        assert warnings == [], "tryfirst on firstresult hooks is reserved for deployment overrides"
        hooks = [c.name for c in pm.get_hookcallers(plugin_module)]
        assert hooks, "the plugin implements no hermes_core hook"

    def test_settings_models_forbid_extras_and_hide_secrets(self, plugin_name, plugin_module):
        pm = _plugin_manager_with(plugin_module, plugin_name)
        specs = []
        for impl in pm.hook.hermes_settings_schema.get_hookimpls():
            if impl.plugin_name == plugin_name:
                result = impl.function() or ()
                specs.extend([result] if isinstance(result, SettingsSpec) else result)
        if not specs:
            pytest.skip("the plugin declares no settings (no hermes_settings_schema)")
        for spec in specs:
            assert isinstance(spec, SettingsSpec)
            assert issubclass(spec.model, BaseModel)
            assert spec.model.model_config.get("extra") == "forbid", \
                f"{spec.model.__name__} must set model_config = ConfigDict(extra='forbid')"
            for field_name, info in spec.model.model_fields.items():
                if SECRET_FIELD.search(field_name):
                    assert is_secret_annotation(info.annotation), \
                        f"{spec.model.__name__}.{field_name} must be a SecretStr"

    def test_loads_through_the_real_loader(self, plugin_name, tmp_path, monkeypatch):
        from ..settings import GatewayConfig

        monkeypatch.delenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", raising=False)
        monkeypatch.delenv("HERMES_CONFIG", raising=False)
        monkeypatch.setenv("HERMES_PLUGINS", plugin_name)
        clear_entry_point_cache()
        config = GatewayConfig(home=tmp_path, platforms={})
        pm, report = create_plugin_manager(config, raise_on_fatal=False)
        record = report.get(plugin_name, PLUGINS_GROUP)
        assert record is not None
        assert (record.status, record.error) == (LOADED, None)
        assert pm.get_plugin(plugin_name) is not None


# ---- AdapterContract -------------------------------------------------------------------------

class AdapterContract:
    """Checks an adapter class against the SDK contract (`hermes_core.sdk.BaseAdapter`).

    Fixtures to provide: `adapter_class`. Optional: `adapter_settings` (the validated settings
    model; default None), `fake_transport` (a fake platform server the adapter talks to; default
    None), `send_target` (a SessionSource to send to), and override `sent_texts(adapter,
    fake_transport)` to return what the platform received when the adapter does not record sends
    itself.

    To have the acknowledgement rule checked (an adapter acknowledges a platform message only
    after `emit` returned; a refused message is left to be redelivered), override
    `deliver_inbound(adapter, fake_transport, text)` and `acknowledged(adapter, fake_transport)`.
    """

    # Seconds the acknowledgement check waits for each step (platform redelivery included).
    ACK_STEP_TIMEOUT_S = 20.0

    @pytest.fixture
    def adapter_class(self) -> type:
        pytest.fail("override the `adapter_class` fixture with your adapter class")

    @pytest.fixture
    def adapter_settings(self):
        return None

    @pytest.fixture
    def fake_transport(self):
        return None

    @pytest.fixture
    def send_target(self, adapter_class) -> SessionSource:
        return SessionSource(platform=adapter_class.spec.name, chat_id="100", chat_type="dm", user_id="100")

    @pytest.fixture
    def adapter(self, adapter_class, adapter_settings, fake_transport):
        return adapter_class(adapter_settings)

    def sent_texts(self, adapter, fake_transport) -> list[str]:
        """Texts the platform received, in order. Default: the adapter's `sent` records."""
        sent = getattr(adapter, "sent", None)
        if sent is None:
            pytest.skip("override AdapterContract.sent_texts to read what the fake transport received")
        return [getattr(m, "text", m) for m in sent]

    async def deliver_inbound(self, adapter, fake_transport, text: str) -> None:
        """Make the fake platform offer one inbound message with `text` to the started adapter,
        without waiting for it to be handled (push it to the fake server, post the webhook in a
        task, …). Default: the acknowledgement check is skipped."""
        pytest.skip("override AdapterContract.deliver_inbound and .acknowledged to check acknowledgements")

    def acknowledged(self, adapter, fake_transport) -> bool:
        """True once the platform was told that the message of `deliver_inbound` is handled
        (polling offset moved past it, webhook answered 2xx, socket envelope acked, …)."""
        pytest.skip("override AdapterContract.deliver_inbound and .acknowledged to check acknowledgements")

    def test_spec_is_complete(self, adapter_class):
        spec = adapter_class.spec
        assert isinstance(spec, AdapterSpec)
        assert re.fullmatch(r"[a-z][a-z0-9_]*", spec.name), f"platform id {spec.name!r} must be lower_snake"
        assert spec.label
        assert spec.max_message_length > 0
        assert spec.length_unit in ("chars", "utf16", "bytes")
        assert set(spec.capabilities) <= KNOWN_CAPABILITIES, set(spec.capabilities) - KNOWN_CAPABILITIES
        assert isinstance(spec.pii_safe, bool)

    def test_adapter_entry_point_matches_spec(self, adapter_class):
        eps = [ep for ep in importlib.metadata.entry_points(group=ADAPTERS_GROUP)
               if ep.value == f"{adapter_class.__module__}:{adapter_class.__qualname__}"]
        if not eps:
            pytest.skip("the adapter class is not published as a hermes_core.adapters entry point")
        assert [ep.name for ep in eps] == [adapter_class.spec.name]

    @_async_test
    async def test_start_and_stop_are_idempotent(self, adapter):
        await adapter.start()
        await adapter.start()
        await adapter.stop()
        await adapter.stop()

    @_async_test
    async def test_health_reports_ok(self, adapter):
        await adapter.start()
        try:
            health = await adapter.health()
        finally:
            await adapter.stop()
        assert isinstance(health, dict) and isinstance(health.get("ok"), bool)

    @_async_test
    async def test_emit_reaches_the_bound_handler(self, adapter, send_target):
        received: list[MessageEvent] = []

        async def handler(event: MessageEvent) -> None:
            received.append(event)

        event = MessageEvent(source=send_target, text="contract ping", message_id="m1")
        with pytest.raises(RuntimeError):
            await adapter.emit(event)  # no handler bound yet
        adapter.bind(handler)
        await adapter.emit(event)
        assert received == [event]

    @_async_test
    async def test_send_accepts_a_chunk_of_exactly_the_limit(self, adapter, adapter_class, fake_transport,
                                                             send_target):
        # The delivery layer hands the adapter chunks of up to `max_message_length` units; the
        # adapter must send such a chunk whole (not split, truncated, rejected or re-measured in
        # another unit). Multi-unit characters make a wrong unit show: an emoji is 1 char, 2
        # UTF-16 units and 4 bytes.
        spec = adapter_class.spec
        text = exact_length_text(spec.max_message_length, spec.length_unit)
        assert measure(text, spec.length_unit) == spec.max_message_length
        await adapter.start()
        try:
            await adapter.send(send_target, text)
        finally:
            await adapter.stop()
        received = self.sent_texts(adapter, fake_transport)
        assert received[-1:] == [text], (
            f"a chunk of exactly {spec.max_message_length} {spec.length_unit} was not sent whole")

    @_async_test
    async def test_delivery_never_hands_the_adapter_more_than_the_limit(self, adapter, adapter_class,
                                                                       fake_transport, send_target):
        # The core's default plan (`hermes_plan_delivery`) performed by `sdk.sending.deliver_plan`,
        # exactly as the gateway does it, for a reply 2.5 times the limit.
        # Lines of limit - 1 units: with their newline each fills a chunk exactly, so the plan is
        # three chunks without newlines inside (adapters that write lines stay comparable).
        spec = adapter_class.spec
        line = exact_length_text(max(1, spec.max_message_length - 1), spec.length_unit)
        text = line + "\n" + line + "\n" + exact_length_text(max(1, spec.max_message_length // 2), spec.length_unit)
        pm, _ = create_plugin_manager(None)
        delivery = OutboundDelivery(session_key="contract", session_id=None, target=send_target, text=text,
                                    spec=spec)
        plan = pm.hook.hermes_plan_delivery(delivery=delivery)
        handed: list[str] = []

        class Recording:
            # Sees exactly what the delivery layer gives the adapter, then lets the adapter send it.
            async def send(self, target, chunk, *, reply_to=None, metadata=None):
                handed.append(chunk)
                return await adapter.send(target, chunk, reply_to=reply_to, metadata=metadata)

        await adapter.start()
        try:
            outcome = await deliver_plan(Recording(), send_target, plan)
        finally:
            await adapter.stop()
        assert outcome.error is None and outcome.delivered is True
        assert len(handed) >= 3
        over = [measure(c, spec.length_unit) for c in handed if measure(c, spec.length_unit) > spec.max_message_length]
        assert over == [], f"chunks over {spec.max_message_length} {spec.length_unit} reached the adapter"
        assert handed == plan.chunks
        assert self.sent_texts(adapter, fake_transport)[-len(handed):] == handed

    @_async_test
    async def test_acknowledges_only_after_emit_returned(self, adapter, fake_transport):
        # docs/behaviour.md §0: `emit` returns once the message is durable; acknowledging before
        # that (or after a refusal) loses the message if the gateway dies in between.
        gateway = FakeGateway(refuse=1)
        gateway.hold = asyncio.Event()
        gateway.attach(adapter)

        async def until(predicate, what: str) -> None:
            try:
                async with asyncio.timeout(self.ACK_STEP_TIMEOUT_S):
                    while not predicate():
                        await asyncio.sleep(0.01)
            except TimeoutError:
                pytest.fail(f"{what} within {self.ACK_STEP_TIMEOUT_S:g} s")

        await adapter.start()
        try:
            await self.deliver_inbound(adapter, fake_transport, "contract ack")
            await until(lambda: gateway.refused == 1, "the message did not reach the gateway")
            assert not self.acknowledged(adapter, fake_transport), \
                "the adapter acknowledged a message the gateway refused: the platform will not redeliver it"
            await until(lambda: gateway.in_emit == 1, "the refused message was not offered again")
            assert not self.acknowledged(adapter, fake_transport), \
                "the adapter acknowledged the message before emit returned"
            gateway.hold.set()
            await until(lambda: self.acknowledged(adapter, fake_transport),
                        "the message was not acknowledged after emit returned")
            assert gateway.texts() == ["contract ack"]
        finally:
            gateway.hold.set()
            await adapter.stop()

    @pytest.mark.parametrize("capability", sorted(CAPABILITY_METHODS))
    def test_declared_capability_has_its_method(self, adapter_class, capability):
        if capability not in adapter_class.spec.capabilities:
            pytest.skip(f"capability {capability!r} not declared by {adapter_class.spec.name}")
        method = getattr(adapter_class, CAPABILITY_METHODS[capability], None)
        assert method is not None and inspect.iscoroutinefunction(method), \
            f"capability {capability!r} needs an async {CAPABILITY_METHODS[capability]}()"


# ---- SessionKeyContract ----------------------------------------------------------------------

class SessionKeyContract:
    """Checks the session-key and shared-session hooks for one platform (seed §4, §5; docs/behaviour.md §4).

    Fixtures: `platform` (required); `key_plugin` (the plugin module or object whose key hooks are
    tested; default None = the core builtins only).
    """

    @pytest.fixture
    def platform(self) -> str:
        pytest.fail("override the `platform` fixture with your platform id")

    @pytest.fixture
    def key_plugin(self):
        return None

    @pytest.fixture
    def key_pm(self, key_plugin):
        pm, _ = create_plugin_manager(None)
        if key_plugin is not None:
            pm.register(key_plugin, name="plugin-under-test")
        return pm

    def _key(self, pm, source, group=True, thread=False):
        policy = KeyPolicy(group_sessions_per_user=group, thread_sessions_per_user=thread)
        return session_key_for(pm, policy, source), session_shared_for(pm, policy, source)

    def test_keys_are_deterministic_and_namespaced(self, key_pm, platform):
        source = SessionSource(platform=platform, chat_id="c1", chat_type="group", user_id="u1")
        first, _ = self._key(key_pm, source)
        again, _ = self._key(key_pm, SessionSource(platform=platform, chat_id="c1", chat_type="group", user_id="u1"))
        assert first == again
        assert first.startswith(f"{KEY_PREFIX}:{platform}:")

    def test_dms_never_collide_or_share(self, key_pm, platform):
        a = SessionSource(platform=platform, chat_id="dm-a", chat_type="dm", user_id="ua")
        b = SessionSource(platform=platform, chat_id="dm-b", chat_type="dm", user_id="ub")
        for group in (True, False):
            (ka, sa), (kb, sb) = self._key(key_pm, a, group), self._key(key_pm, b, group)
            assert ka != kb
            assert sa is False and sb is False

    @pytest.mark.parametrize("group", [True, False])
    def test_group_isolation_follows_group_sessions_per_user(self, key_pm, platform, group):
        a = SessionSource(platform=platform, chat_id="g1", chat_type="group", user_id="ua")
        b = SessionSource(platform=platform, chat_id="g1", chat_type="group", user_id="ub")
        (ka, shared), (kb, _) = self._key(key_pm, a, group), self._key(key_pm, b, group)
        assert (ka != kb) is group
        assert shared is (not group)

    @pytest.mark.parametrize("thread", [True, False])
    def test_thread_isolation_follows_thread_sessions_per_user(self, key_pm, platform, thread):
        a = SessionSource(platform=platform, chat_id="g1", chat_type="group", user_id="ua", thread_id="t1")
        b = SessionSource(platform=platform, chat_id="g1", chat_type="group", user_id="ub", thread_id="t1")
        (ka, shared), (kb, _) = self._key(key_pm, a, True, thread), self._key(key_pm, b, True, thread)
        assert (ka != kb) is thread
        assert shared is (not thread)

    def test_key_and_shared_predicate_agree(self, key_pm, platform):
        # Two users in one non-DM chat share a key exactly when the chat is a shared session.
        # (A DM chat id belongs to one user, so DMs are covered by test_dms_never_collide_or_share.)
        for chat_type in ("group", "channel"):
            for thread_id in (None, "t9"):
                for group in (True, False):
                    for thread in (True, False):
                        a = SessionSource(platform=platform, chat_id="x1", chat_type=chat_type,
                                          user_id="ua", thread_id=thread_id)
                        b = SessionSource(platform=platform, chat_id="x1", chat_type=chat_type,
                                          user_id="ub", thread_id=thread_id)
                        (ka, shared), (kb, _) = self._key(key_pm, a, group, thread), self._key(key_pm, b, group, thread)
                        assert (ka == kb) is shared, (chat_type, thread_id, group, thread)


# ---- RedactionContract -----------------------------------------------------------------------

class RedactionContract:
    """Checks PII handling for one platform over the shared corpus (`testing.pii_corpus`).

    Fixtures: `platform` (required); `redaction_plugin` (plugin module/object adding rules or a
    pseudonymiser; default None = builtins only).
    """

    @pytest.fixture
    def platform(self) -> str:
        pytest.fail("override the `platform` fixture with your platform id")

    @pytest.fixture
    def redaction_plugin(self):
        return None

    @pytest.fixture
    def redaction_pm(self, redaction_plugin):
        pm, _ = create_plugin_manager(None)
        if redaction_plugin is not None:
            pm.register(redaction_plugin, name="plugin-under-test")
        return pm

    @pytest.mark.parametrize("scope", ["log", "llm_context", "index"])
    def test_no_pii_leaks_into_scope(self, redaction_pm, platform, scope):
        leaks = [s.secret for s in samples_for(platform)
                 if s.secret in redact_text(redaction_pm, platform, s.text, scope)]
        assert leaks == []

    def test_ordinary_text_is_kept(self, redaction_pm, platform):
        assert [redact_text(redaction_pm, platform, t, "log") for t in NON_PII_TEXTS] == list(NON_PII_TEXTS)

    def test_pseudonyms_are_deterministic_and_stable(self, redaction_pm, redaction_plugin, platform):
        fresh, _ = create_plugin_manager(None)
        if redaction_plugin is not None:
            fresh.register(redaction_plugin, name="plugin-under-test")
        for kind, value in (("user", "u-123456"), ("chat", "c-987654")):
            first = redaction_pm.hook.hermes_pseudonymize(platform=platform, kind=kind, value=value)
            assert first and value not in first
            assert first == redaction_pm.hook.hermes_pseudonymize(platform=platform, kind=kind, value=value)
            assert first == fresh.hook.hermes_pseudonymize(platform=platform, kind=kind, value=value)

    def test_routing_uses_raw_ids(self, redaction_pm, platform, tmp_path):
        from ..settings import GatewayConfig

        source = SessionSource(platform=platform, chat_id="555000111", chat_type="group", user_id="777000999")
        policy = key_policy(redaction_pm, GatewayConfig(home=tmp_path, platforms={}))
        key = session_key_for(redaction_pm, policy, source)
        canonical = redaction_pm.hook.hermes_canonical_identity(platform=platform, kind="chat", value="555000111")
        pseudonym = redaction_pm.hook.hermes_pseudonymize(platform=platform, kind="chat", value=canonical)
        assert canonical in key
        assert pseudonym not in key


__all__ = ["AdapterContract", "PluginContract", "RedactionContract", "SessionKeyContract", "exact_length_text"]
