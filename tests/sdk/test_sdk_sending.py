"""Shared send helpers (docs/adapters.md §0.4): per-chat order, retry-after, delivery outcome."""

import asyncio

import pytest

from hermes_core.model.source import SessionSource
from hermes_core.sdk.errors import RetryAfter, RetryAfterExceeded, SendError
from hermes_core.sdk.sending import (
    ChatSendQueue,
    RetryPolicy,
    deliver_plan,
    send_chunks,
    send_with_retry,
)
from hermes_core.testing.fakes import CapturingAdapter, FakeClock
from hermes_core.types import DeliveryPlan

CHAT = SessionSource(platform="fake", chat_id="100", chat_type="group", user_id="7")


async def test_first_chunk_replies_rest_are_plain():
    adapter = CapturingAdapter()
    results = await send_chunks(adapter, CHAT, ["one", "two", "three"], reply_to="55")
    assert [r.message_id for r in results] == ["1", "2", "3"]
    assert [(m.text, m.reply_to) for m in adapter.sent] == [("one", "55"), ("two", None), ("three", None)]


async def test_concurrent_replies_to_one_chat_keep_their_order():
    adapter = CapturingAdapter()
    queue = ChatSendQueue()
    await asyncio.gather(
        send_chunks(adapter, CHAT, ["a1", "a2", "a3"], queue=queue),
        send_chunks(adapter, CHAT, ["b1", "b2", "b3"], queue=queue),
    )
    # Without the per-chat lock the two replies interleave (a1 b1 a2 b2 …).
    assert adapter.texts() == ["a1", "a2", "a3", "b1", "b2", "b3"]
    assert queue.active_chats() == 0


async def test_retry_after_waits_the_server_value_then_sends():
    adapter = CapturingAdapter()
    adapter.fail_with = [RetryAfter(3), RetryAfter(1.5)]
    clock = FakeClock()
    results = await send_chunks(adapter, CHAT, ["hello"], sleep=clock.sleep)
    assert clock.sleeps == [3.0, 1.5]
    assert adapter.texts() == ["hello"]
    assert results[0].message_id == "1"


async def test_retry_after_above_cap_gives_up_without_waiting():
    adapter = CapturingAdapter()
    adapter.fail_with = [RetryAfter(600)]
    clock = FakeClock()
    with pytest.raises(RetryAfterExceeded, match="600s, above the 60s cap") as info:
        await send_chunks(adapter, CHAT, ["hello"], sleep=clock.sleep, policy=RetryPolicy(max_wait_s=60))
    assert clock.sleeps == []
    assert info.value.retry_after == 600.0
    assert adapter.sent == []


async def test_retry_after_gives_up_after_max_attempts():
    clock = FakeClock()
    calls = 0

    async def always_limited():
        nonlocal calls
        calls += 1
        raise RetryAfter(2)

    with pytest.raises(RetryAfterExceeded, match="after 3 attempts") as info:
        await send_with_retry(always_limited, policy=RetryPolicy(max_attempts=3), sleep=clock.sleep)
    assert calls == 3
    assert clock.sleeps == [2.0, 2.0]
    assert info.value.attempts == 3


async def test_other_errors_are_not_retried_and_name_the_chunk():
    adapter = CapturingAdapter()
    adapter.fail_with = [ConnectionError("reset by peer"), RetryAfter(1)]
    with pytest.raises(SendError, match=r"chunk 1/2 failed: ConnectionError: reset by peer") as info:
        await send_chunks(adapter, CHAT, ["x", "y"])
    assert info.value.sent == ()
    # Not retried: the second scripted failure is still pending, nothing was sent.
    assert len(adapter.fail_with) == 1 and adapter.sent == []


async def test_deliver_plan_reports_partial_failure():
    adapter = CapturingAdapter.with_spec(name="fake2")()
    adapter.fail_with = []
    plan = DeliveryPlan(chunks=["first", "second"], reply_to_message_id="9")

    class FailSecond(CapturingAdapter):
        async def send(self, target, text, **kw):
            if text == "second":
                raise RuntimeError("boom")
            return await super().send(target, text, **kw)

    outcome = await deliver_plan(FailSecond(), CHAT, plan)
    assert outcome.delivered is False
    assert outcome.message_ids == ("1",)
    assert outcome.error == "chunk 2/2 failed: RuntimeError: boom"

    ok = await deliver_plan(adapter, CHAT, plan)
    assert ok.delivered is True and ok.message_ids == ("1", "2")


async def test_vetoed_plan_sends_nothing():
    adapter = CapturingAdapter()
    outcome = await deliver_plan(adapter, CHAT, DeliveryPlan(chunks=["x"], veto=True, reason="quiet hours"))
    assert outcome.delivered is False
    assert outcome.error == "vetoed: quiet hours"
    assert adapter.sent == []


def test_retry_after_clamps_negative_seconds():
    assert RetryAfter(-5).seconds == 0.0
    assert str(RetryAfter(2, "chat")) == "rate limited: retry after 2s (chat)"
