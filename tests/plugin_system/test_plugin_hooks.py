"""One test per hook (`test_hook_<name>`), plus the datasette-style check that every hookspec is
documented and tested. Expected values come from docs/behaviour.md §4, §6, §7 and docs/architecture.md §2."""

import ast
import asyncio
from pathlib import Path

import pytest

from hermes_core import hookspecs
from hermes_core.markers import hookimpl, override
from hermes_core.model.source import SessionSource
from hermes_core.plugin_system import call_broadcast, create_plugin_manager, key_policy, session_key_for
from hermes_core.plugin_system.redaction import redact_text, redaction_rules
from hermes_core.settings import GatewayConfig
from hermes_core.types import AdapterSpec, KeyPolicy, OutboundDelivery, RecoveryPlan, RedactionRule

TESTS_ROOT = Path(__file__).resolve().parents[1]


def _pm():
    pm, _ = create_plugin_manager(None)
    return pm


def _hook_names():
    return sorted(name for name in dir(_pm().hook) if name.startswith("hermes_"))


def test_hookspec_list_is_the_documented_set():
    assert _hook_names() == [
        "hermes_after_deliver", "hermes_authorize", "hermes_canonical_identity", "hermes_configure", "hermes_failure_notice", "hermes_housekeeping",
        "hermes_on_delivery_error", "hermes_on_session_recovered", "hermes_plan_delivery",
        "hermes_platform_notes", "hermes_pseudonymize", "hermes_recovery_plan", "hermes_redaction_rules",
        "hermes_session_finalized", "hermes_session_key", "hermes_session_reset", "hermes_session_shared",
        "hermes_settings_schema", "hermes_shutdown", "hermes_startup",
    ]


@pytest.mark.parametrize("name", _hook_names())
def test_every_hookspec_is_documented(name):
    doc = (getattr(hookspecs, name).__doc__ or "").strip()
    assert doc, f"{name} has no docstring"
    for line in ("Kind:", "Returns:", "Wrap:", "Timeout:"):
        assert line in doc, f"{name} docstring lacks {line!r}"
    spec_opts = getattr(_pm().hook, name).spec.opts
    if spec_opts.get("firstresult"):
        assert "FIRSTRESULT" in doc and "SYNC ONLY" in doc
        assert name not in hookspecs.ASYNC_ALLOWED_HOOKS
    if name in hookspecs.ASYNC_ALLOWED_HOOKS:
        assert "Kind: Broadcast, async allowed" in doc
    else:
        assert "SYNC ONLY" in doc


def _test_function_names():
    names = set()
    for path in TESTS_ROOT.rglob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names.update(node.name for node in ast.walk(tree)
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return names


def test_every_hookspec_has_a_test():
    defined = _test_function_names()
    missing = [name for name in _hook_names() if f"test_hook_{name}" not in defined]
    assert missing == []


# ---- per-hook tests ------------------------------------------------------------------------

def test_hook_hermes_configure(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    config = GatewayConfig(home=tmp_path, platforms={})
    pm, _ = create_plugin_manager(config)
    seen = []

    class Late:
        @hookimpl
        def hermes_configure(self, config):
            seen.append(config)

    pm.register(Late(), name="late")  # historic: registered after the call, still receives it
    assert seen == [config]


def test_hook_hermes_canonical_identity():
    pm = _pm()
    # Builtin: WhatsApp ids normalised (docs/behaviour.md §4), other platforms unchanged.
    assert pm.hook.hermes_canonical_identity(platform="whatsapp", kind="user",
                                             value="+15551234567:12@s.whatsapp.net") == "15551234567"
    assert pm.hook.hermes_canonical_identity(platform="signal", kind="user", value="+4915112345678") == "+4915112345678"

    class Aliases:  # a plugin's alias store: folds a phone number into the Signal UUID
        @hookimpl
        def hermes_canonical_identity(self, platform, kind, value):
            if platform == "signal" and value == "+4915112345678":
                return "3f2504e0-4f89-11d3-9a0c-0305e82c3301"

    pm.register(Aliases(), name="aliases")
    config = GatewayConfig(home="/nonexistent-home", platforms={})
    source = SessionSource(platform="signal", chat_id="+4915112345678", chat_type="dm")
    assert session_key_for(pm, key_policy(pm, config), source) == \
        "agent:main:signal:dm:3f2504e0-4f89-11d3-9a0c-0305e82c3301"


def test_hook_hermes_session_shared():
    pm = _pm()
    dm = SessionSource(platform="slack", chat_id="D1", chat_type="dm", user_id="U1")
    group = SessionSource(platform="slack", chat_id="G1", chat_type="group", user_id="U1")
    shared_groups = KeyPolicy(group_sessions_per_user=False)
    assert pm.hook.hermes_session_shared(source=dm, policy=shared_groups) is False
    assert pm.hook.hermes_session_shared(source=group, policy=shared_groups) is True
    assert pm.hook.hermes_session_shared(source=group, policy=KeyPolicy()) is False

    class Deployment:
        @override
        def hermes_session_shared(self, source, policy):
            return source.platform == "slack"

    pm.register(Deployment(), name="deployment:test")
    assert pm.hook.hermes_session_shared(source=dm, policy=shared_groups) is True


def _access_request(source, **settings):
    from hermes_core.model.access import AccessRequest
    from hermes_core.sdk import PlatformSettings

    table = PlatformSettings(**settings)
    ids = lambda *values: frozenset(v for v in values if v)  # noqa: E731
    return AccessRequest(source=source, settings=table, sender_ids=ids(source.user_id), chat_ids=ids(source.chat_id),
                         allowed_user_ids=frozenset(table.allowed_users), allowed_chat_ids=frozenset(table.allowed_chats))


def test_hook_hermes_authorize():
    # docs/behaviour.md §9: the builtin allow-lists, then a deployment override outranks them.
    pm = _pm()
    ask = lambda source, **s: pm.hook.hermes_authorize(request=_access_request(source, **s))  # noqa: E731
    alice = SessionSource(platform="slack", chat_id="D1", chat_type="dm", user_id="U1")
    bot = SessionSource(platform="slack", chat_id="D1", chat_type="dm", user_id="B1", is_bot=True)
    member = SessionSource(platform="slack", chat_id="C9", chat_type="channel", user_id="U2", role_authorized=True)
    assert ask(alice) is False
    assert ask(alice, allowed_users=["U1"]) is True
    assert ask(alice, allowed_users=["U2"]) is False
    assert ask(alice, allowed_chats=["D1"]) is True
    assert ask(alice, allow_all=True) is True
    assert ask(bot, allow_all=True) is False
    assert ask(bot, allow_all=True, allow_bots=True) is True
    assert ask(member, allowed_roles=["R1"]) is True
    assert ask(member) is False  # role_authorized counts only where roles are configured
    assert ask(SessionSource(platform="local", chat_id="terminal")) is True

    class Deployment:
        @override
        def hermes_authorize(self, request):
            return request.source.user_id == "U2"

    pm.register(Deployment(), name="deployment:test")
    assert ask(alice, allow_all=True) is False
    assert ask(member) is True


def test_hook_hermes_platform_notes():
    pm = _pm()

    class A:
        @hookimpl
        def hermes_platform_notes(self, context):
            return ["Telegram supports MarkdownV2."]

    class B:
        @hookimpl
        def hermes_platform_notes(self, context):
            return None  # nothing to add

    pm.register(A(), name="a")
    pm.register(B(), name="b")
    notes = [line for batch in pm.hook.hermes_platform_notes(context=None) if batch for line in batch]
    assert notes == ["Telegram supports MarkdownV2."]


def test_hook_hermes_redaction_rules():
    pm = _pm()
    assert [r.name for r in redaction_rules(pm, "telegram", "log")] == ["contact_details"]
    assert redaction_rules(pm, "telegram", "store") == []

    class TicketRule:
        @hookimpl
        def hermes_redaction_rules(self, platform):
            return [RedactionRule(name="ticket", scopes=frozenset({"log"}),
                                  apply=lambda text: text.replace("TICKET-7", "[ticket]"))]

    class TriesToUnredact:
        @hookimpl
        def hermes_redaction_rules(self, platform):
            return [RedactionRule(name="aaa_noop", scopes=frozenset({"log"}), apply=lambda text: text)]

    pm.register(TicketRule(), name="ticket")
    pm.register(TriesToUnredact(), name="noop")
    text = "TICKET-7 from bob@example.com"
    assert redact_text(pm, "telegram", text, "log") == "[ticket] from [email]"
    assert redact_text(pm, "telegram", text, "llm_context") == "TICKET-7 from [email]"
    with pytest.raises(ValueError, match="unknown redaction scope 'disk'"):
        redact_text(pm, "telegram", text, "disk")


def test_hook_hermes_pseudonymize():
    pm = _pm()
    # docs/behaviour.md §7: user → user_<sha256[:12]>, chat → <prefix>:<12hex> or <12hex>.
    assert pm.hook.hermes_pseudonymize(platform="telegram", kind="user", value="123456789") == "user_15e2b0d3c338"
    assert pm.hook.hermes_pseudonymize(platform="telegram", kind="chat", value="123456789") == "15e2b0d3c338"
    assert pm.hook.hermes_pseudonymize(platform="signal", kind="chat", value="group:AbC+/=") == "group:ffba54febd55"


def test_hook_hermes_recovery_plan():
    pm = _pm()
    plan = pm.hook.hermes_recovery_plan(session=None, failure="restart_interrupted")
    assert plan == RecoveryPlan(action="resume", reason="restart_interrupted")
    assert pm.hook.hermes_recovery_plan(session=None, failure="shutdown_timeout").action == "resume"
    assert pm.hook.hermes_recovery_plan(session=None, failure="agent_error") == \
        RecoveryPlan(action="give_up", reason="agent_error")

    class Patient:
        @hookimpl
        def hermes_recovery_plan(self, session, failure):
            if failure == "agent_error":
                return RecoveryPlan(action="backoff", delay_seconds=30.0, reason="transient")

    pm.register(Patient(), name="patient")
    assert pm.hook.hermes_recovery_plan(session=None, failure="agent_error").delay_seconds == 30.0
    assert pm.hook.hermes_recovery_plan(session=None, failure="restart_timeout").action == "resume"


async def test_hook_hermes_on_delivery_error():
    pm = _pm()
    seen = []

    class Observer:
        @hookimpl
        async def hermes_on_delivery_error(self, delivery, error):
            seen.append(str(error))

    pm.register(Observer(), name="observer")
    spec = AdapterSpec(name="fake", label="Fake")
    delivery = OutboundDelivery(session_key="k", session_id="s", target=None, text="hi", spec=spec)
    results = await call_broadcast(pm, "hermes_on_delivery_error", timeout=5, delivery=delivery,
                                   error=ConnectionError("reset"))
    assert results == [("observer", None)]
    assert seen == ["reset"]


async def test_hook_hermes_on_session_recovered():
    pm = _pm()
    seen = []

    class Observer:
        @hookimpl
        def hermes_on_session_recovered(self, session, plan):
            seen.append((session, plan.action))

    pm.register(Observer(), name="observer")
    await call_broadcast(pm, "hermes_on_session_recovered", timeout=5, session="entry",
                         plan=RecoveryPlan(action="resume"))
    assert seen == [("entry", "resume")]


async def test_hook_hermes_startup(make_app):
    events = []

    class Lifecycle:
        @hookimpl
        async def hermes_startup(self, app):
            await asyncio.sleep(0)
            events.append(("startup", app.started))

        @hookimpl
        def hermes_shutdown(self, app):
            events.append(("shutdown", app is not None))

    app = make_app(plugins=[Lifecycle()])
    await app.start()
    assert events == [("startup", False)]  # called at the end of start, before `started` is set
    await app.stop()
    assert events == [("startup", False), ("shutdown", True)]


async def test_hook_hermes_shutdown():
    pm = _pm()

    class Slow:
        @hookimpl
        async def hermes_shutdown(self, app):
            await asyncio.Event().wait()

    class Closes:
        @hookimpl
        def hermes_shutdown(self, app):
            app.append("closed")

    pm.register(Closes(), name="closes")
    pm.register(Slow(), name="slow")
    app_log = []
    results = await call_broadcast(pm, "hermes_shutdown", timeout=0.05, app=app_log)
    assert [name for name, _ in results] == ["slow", "closes"]
    assert app_log == ["closed"]  # a hung plugin cannot stop the others shutting down


def test_hook_hermes_failure_notice(tmp_path):
    from hermes_core.pipeline.notices import failure_notice

    pm = _pm()
    config = GatewayConfig(home=tmp_path, agent={"gateway_timeout": 90})
    source = SessionSource("telegram", "1", chat_type="dm", user_id="1")
    error = RuntimeError("POST http://10.0.0.1:8000/v1 failed")
    # Deferred by everyone: the configured texts.
    assert failure_notice(pm, config, "agent_failed", source, error) == \
        "Sorry, I could not answer this message. Please try again later."
    assert failure_notice(pm, config, "agent_timeout", source, error) == \
        "The agent did not answer within 90 seconds; the turn was stopped."
    assert failure_notice(pm, config, "internal_error", source, error) == \
        "Sorry, this message could not be processed. Please try again later."

    class Polite:
        @hookimpl
        def hermes_failure_notice(self, kind, source, error):
            return "Un moment, s'il vous plaît." if kind == "agent_timeout" else None

    class Empty:
        @override
        def hermes_failure_notice(self, kind, source, error):
            return "" if kind == "internal_error" else None

    pm.register(Polite(), name="polite")
    pm.register(Empty(), name="deployment:empty")
    assert failure_notice(pm, config, "agent_timeout", source, error) == "Un moment, s'il vous plaît."
    # An empty text is not a notice: the configured one is sent.
    assert failure_notice(pm, config, "internal_error", source, error) == \
        "Sorry, this message could not be processed. Please try again later."


def _hookspec_type_names():
    """The names the hookspecs' annotations use (imported under TYPE_CHECKING there)."""
    import typing

    from hermes_core.app import GatewayApp
    from hermes_core.model.access import AccessRequest
    from hermes_core.model.context import SessionContext
    from hermes_core.model.entry import SessionEntry
    from hermes_core.scheduler import HousekeepingContext
    from hermes_core.types import (DeliveryOutcome, DeliveryPlan, RecoveryPlan, RedactionRule, SettingsSpec)

    names = dict(vars(typing))
    names.update(GatewayApp=GatewayApp, AccessRequest=AccessRequest, SessionContext=SessionContext,
                 SessionEntry=SessionEntry, SessionSource=SessionSource, HousekeepingContext=HousekeepingContext,
                 GatewayConfig=GatewayConfig, DeliveryOutcome=DeliveryOutcome, DeliveryPlan=DeliveryPlan,
                 KeyPolicy=KeyPolicy, OutboundDelivery=OutboundDelivery, RecoveryPlan=RecoveryPlan,
                 RedactionRule=RedactionRule, SettingsSpec=SettingsSpec)
    return names


@pytest.mark.parametrize("name", _hook_names())
def test_every_hookspec_is_annotated_with_real_types(name):
    import inspect
    import typing

    spec = getattr(hookspecs, name)
    signature = inspect.signature(spec)
    unannotated = [p for p, param in signature.parameters.items() if param.annotation is inspect.Parameter.empty]
    assert unannotated == [], f"{name}: arguments without a type: {unannotated}"
    assert signature.return_annotation is not inspect.Signature.empty, f"{name} has no return type"
    hints = typing.get_type_hints(spec, localns=_hookspec_type_names())  # NameError: a type that does not exist
    assert set(hints) == set(signature.parameters) | {"return"}


def test_the_package_ships_py_typed():
    import hermes_core

    assert (Path(hermes_core.__file__).parent / "py.typed").is_file()
