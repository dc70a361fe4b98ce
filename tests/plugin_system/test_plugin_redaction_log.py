"""The `log` redaction scope at runtime (seed §9; docs/architecture.md §2 `hermes_redaction_rules`):
`RedactionLogFilter` / `install_log_redaction` and redacted plugin errors in `call_broadcast`."""

import io
import logging
import re
import time

import pytest

from hermes_core import hookimpl
from hermes_core.model.source import SessionSource
from hermes_core.plugin_system import create_plugin_manager
from hermes_core.plugin_system.dispatch import call_broadcast
from hermes_core.plugin_system.redaction import (
    RedactionLogFilter,
    install_log_redaction,
    redact_for_log,
)
from hermes_core.testing.pii_corpus import NON_PII_TEXTS
from hermes_core.types import AdapterSpec, OutboundDelivery, RedactionRule


@pytest.fixture
def pm():
    manager, _ = create_plugin_manager(None)
    return manager


@pytest.fixture
def install():
    """`install_log_redaction` that is undone after the test (pytest's own capture handlers may
    be attached to the loggers too, and must not keep a filter into the next test)."""
    undo = []

    def do(*args, **kwargs):
        uninstall = install_log_redaction(*args, **kwargs)
        undo.append(uninstall)
        return uninstall

    yield do
    for uninstall in undo:
        uninstall()


@pytest.fixture
def logger():
    """A private logger with one in-memory handler (message only), removed afterwards."""
    lg = logging.getLogger("test.redaction.private")
    lg.setLevel(logging.DEBUG)
    lg.propagate = False
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    lg.addHandler(handler)
    lg.stream = stream
    lg.handler = handler
    yield lg
    lg.removeHandler(handler)


class AcmeTickets:
    """A platform plugin's log rule, for its own platform only."""

    @hookimpl
    def hermes_redaction_rules(self, platform):
        if platform == "acme":
            return [RedactionRule("acme_ticket", frozenset({"log"}), lambda t: re.sub(r"ACME-\d+", "[ticket]", t))]
        return None


class BrokenRule:
    @hookimpl
    def hermes_redaction_rules(self, platform):
        def boom(text):
            logging.getLogger("test.redaction.private").error("rule saw %s", text)  # must not recurse
            raise RuntimeError("boom")

        return [RedactionRule("boom", frozenset({"log"}), boom)]


def test_installed_filter_redacts_messages_and_uninstall_restores(pm, logger, install):
    uninstall = install(pm, logger)
    logger.info("user %s wrote from %s", "bob@mail.example.co.uk", "+44 20 7946 0958")
    uninstall()
    uninstall()  # idempotent
    logger.info("user %s wrote", "bob@mail.example.co.uk")
    assert logger.stream.getvalue().splitlines() == [
        "user [email] wrote from [phone]",
        "user bob@mail.example.co.uk wrote",
    ]


def test_ordinary_log_text_is_kept(pm, logger, install):
    install(pm, logger)
    for text in NON_PII_TEXTS:
        logger.info("%s", text)
    assert logger.stream.getvalue().splitlines() == list(NON_PII_TEXTS)


def test_tracebacks_are_redacted(pm, logger, install):
    install(pm, logger)
    try:
        raise ValueError("no route to +4915112345678")
    except ValueError:
        logger.exception("send failed for %s", "alice.smith+hermes@example.com")
    out = logger.stream.getvalue()
    assert out.splitlines()[0] == "send failed for [email]"
    # The builtin rule takes a long digit run for a platform id before a phone number.
    assert out.splitlines()[-1] == "ValueError: no route to [id]"
    assert "4915112345678" not in out and "alice.smith" not in out


def test_filter_on_the_root_handlers_sees_records_of_child_loggers(pm, install):
    root = logging.getLogger()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    root.addHandler(handler)
    try:
        uninstall = install(pm)  # default target: every root handler
        child = logging.getLogger("hermes_core.test_child")
        child.setLevel(logging.INFO)
        child.info("chat -1001234567890 migrated")
        uninstall()
    finally:
        root.removeHandler(handler)
    assert stream.getvalue() == "hermes_core.test_child: chat [id] migrated\n"


def test_platform_rules_apply_to_configured_platforms_and_records_naming_them(pm, logger, install):
    pm.register(AcmeTickets(), name="acme")
    install(pm, logger.handler)  # no platforms given: generic rules only
    logger.info("about ACME-42")
    logger.info("about ACME-43", extra={"platform": "acme"})
    other = logging.getLogger("test.redaction.other")
    other.propagate = False
    stream = io.StringIO()
    other_handler = logging.StreamHandler(stream)
    other.addHandler(other_handler)
    install(pm, other_handler, platforms=["acme", "telegram"])
    other.warning("about ACME-44")
    other.removeHandler(other_handler)
    assert logger.stream.getvalue().splitlines() == ["about ACME-42", "about [ticket]"]
    assert stream.getvalue() == "about [ticket]\n"


def test_a_failing_rule_withholds_the_message_without_recursing(pm, logger, install):
    pm.register(BrokenRule(), name="broken")
    install(pm, logger.handler)
    logger.warning("secret %s", "bob@mail.example.co.uk")
    assert logger.stream.getvalue().splitlines() == [
        "[redacted: logged from inside a redaction rule]",  # the rule's own log line
        "[redacted: rule boom failed (RuntimeError)]",
    ]
    assert redact_for_log(pm, "x") == "[redacted: rule boom failed (RuntimeError)]"


def test_filter_rules_are_cached_until_refresh(pm):
    log_filter = RedactionLogFilter(pm, ["acme"])
    assert log_filter.redact("ACME-1") == "ACME-1"
    pm.register(AcmeTickets(), name="acme")
    assert log_filter.redact("ACME-1") == "ACME-1"  # snapshot taken at first use
    log_filter.refresh()
    assert log_filter.redact("ACME-1") == "[ticket]"


# ---- call_broadcast: plugin error texts go through the log rules --------------------------------

async def test_broadcast_error_text_is_logged_redacted(pm, caplog):
    class Leaky:
        @hookimpl
        async def hermes_after_deliver(self, delivery, outcome):
            raise ConnectionError(f"cannot deliver to {delivery.target.chat_id}: ask bob@mail.example.co.uk "
                                  "about ACME-77")

    pm.register(AcmeTickets(), name="acme")
    pm.register(Leaky(), name="leaky")
    target = SessionSource("acme", "-1001234567890", chat_type="group", user_id="7")
    delivery = OutboundDelivery(session_key="k", session_id="s", target=target, text="hello",
                                spec=AdapterSpec(name="acme", label="Acme"))
    with caplog.at_level(logging.ERROR, logger="hermes_core.plugin_system.dispatch"):
        results = await call_broadcast(pm, "hermes_after_deliver", timeout=5, delivery=delivery, outcome=None)
    assert [r.getMessage() for r in caplog.records] == [
        "plugin leaky failed in hermes_after_deliver: ConnectionError: "
        "cannot deliver to [id]: ask [email] about [ticket]"]
    # The caller still gets the exception itself (raw), only the log line is redacted.
    assert isinstance(dict(results)["leaky"], ConnectionError)


async def test_slow_sync_broadcast_impl_is_not_interrupted_but_is_reported(pm, caplog):
    # hookspecs: sync broadcast implementations must return promptly; only awaitables are
    # time-limited. An overrun is reported by plugin name, and its result still counts.
    class Blocking:
        @hookimpl
        def hermes_session_finalized(self, entry):
            time.sleep(0.05)
            return "finished"

    pm.register(Blocking(), name="blocking")
    with caplog.at_level(logging.WARNING, logger="hermes_core.plugin_system.dispatch"):
        results = await call_broadcast(pm, "hermes_session_finalized", timeout=0.01, entry="E")
    assert results == [("blocking", "finished")]
    [record] = caplog.records
    assert record.getMessage().startswith("plugin blocking blocked the event loop for ")
    assert record.getMessage().endswith(" in hermes_session_finalized (limit 0.01s); synchronous broadcast "
                                        "implementations must return promptly - make it async def")
