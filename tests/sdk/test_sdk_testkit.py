"""The pytest11 fixtures of hermes_core.testing, used the way a plugin author would."""

from datetime import datetime, timezone

from hermes_core.markers import hookimpl
from hermes_core.model.source import SessionSource
from hermes_core.sdk import deliver_plan
from hermes_core.types import DeliveryPlan


async def test_temp_store_is_open_on_a_temporary_home(temp_store, fake_clock, hermes_config):
    assert temp_store.is_open
    source = SessionSource(platform="telegram", chat_id="42", chat_type="dm", user_id="7")
    entry = await temp_store.get_or_create_session(source)
    assert entry.session_key == "agent:main:telegram:dm:42"
    assert entry.created_at == datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)  # the fake clock
    assert hermes_config.db_path.is_file()


async def test_memory_store_is_a_working_store(memory_store):
    source = SessionSource(platform="slack", chat_id="C1", chat_type="channel", user_id="U1")
    first = await memory_store.get_or_create_session(source)
    again = await memory_store.get_or_create_session(source)
    assert first.session_id == again.session_id


def test_fake_clock_moves_only_when_told(fake_clock):
    start = fake_clock()
    assert start == datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    assert fake_clock.advance(90) == datetime(2026, 1, 1, 12, 1, 30, tzinfo=timezone.utc)


async def test_captured_deliveries_records_a_plan(captured_deliveries):
    target = SessionSource(platform="fake", chat_id="9", chat_type="group", thread_id="3")
    outcome = await deliver_plan(captured_deliveries, target, DeliveryPlan(chunks=["a", "b"], reply_to_message_id="77"))
    assert outcome.delivered and outcome.message_ids == ("1", "2")
    assert [(m.chat_id, m.thread_id, m.text, m.reply_to) for m in captured_deliveries.sent] == \
        [("9", "3", "a", "77"), ("9", "3", "b", None)]


class _Notes:
    @hookimpl
    def hermes_platform_notes(self, context):
        return ["registered for one test"]


def test_plugin_registration_registers_for_one_test(plugin_registration, hermes_pm):
    name = plugin_registration(_Notes(), name="notes")
    assert name == "notes"
    assert hermes_pm.hook.hermes_platform_notes(context=None) == [["registered for one test"]]


def test_hermes_pm_is_fresh_for_each_test(hermes_pm):
    assert hermes_pm.get_plugin("notes") is None
    assert hermes_pm.hook.hermes_platform_notes(context=None) == []


async def test_make_app_runs_a_message_through_the_gateway(make_app, captured_deliveries):
    import asyncio

    from hermes_core.model.events import MessageEvent

    app = make_app(adapters=[captured_deliveries], settings={"group_sessions_per_user": False})
    await app.start()
    assert app.adapters == {"fake": captured_deliveries}
    assert captured_deliveries.running
    source = SessionSource(platform="fake", chat_id="g1", chat_type="group", user_id="u1", user_name="Ann")
    await captured_deliveries.emit(MessageEvent(source=source, text="ping through the kit", message_id="m1"))
    for _ in range(500):
        if captured_deliveries.sent:
            break
        await asyncio.sleep(0.01)
    assert len(captured_deliveries.sent) == 1
    reply = captured_deliveries.sent[0]
    assert (reply.chat_id, reply.reply_to) == ("g1", "m1")
    assert "ping through the kit" in reply.text  # the echo agent answers with the message
    entry = await app.store.get_entry("agent:main:fake:group:g1")  # shared group: no participant
    assert entry is not None
    # No explicit stop: make_app stops started apps at teardown.
