"""The agent cache in running turns (seed §10, §11; docs/behaviour.md §8): turns reuse the live transcript
instead of reloading it, an evicted session's next turn rebuilds its full history from the store,
/new gives a fresh history, the live transcript always equals the stored one, and the
housekeeping tick applies the idle TTL and the pressure sweep. Real store (SQLite), real plugin
manager and watcher, the echo agent; a recording adapter stands in for the chat."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pipeline_helpers import SecondsClock, statm

from hermes_core.agents import EchoAgent
from hermes_core.agents.base import AgentError
from hermes_core.agents.echo import count_tokens
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent, SessionSource
from hermes_core.pipeline.agent_cache import AgentCache
from hermes_core.pipeline.memory_budget import MemoryProbe
from hermes_core.pipeline.turn import run_turn
from hermes_core.scheduler import Watcher
from hermes_core.sdk.adapter import BaseAdapter, SendResult
from hermes_core.settings import GatewayConfig
from hermes_core.types import AdapterSpec

KEY = "agent:main:cachechat:dm:7"
MiB = 1024 * 1024


class RecordingAdapter(BaseAdapter):
    spec = AdapterSpec(name="cachechat", label="Cache chat", pii_safe=True, max_message_length=4000)

    def __init__(self):
        super().__init__(None)
        self.sent: list[str] = []

    async def start(self):
        pass

    async def stop(self):
        pass

    async def send(self, target, text, *, reply_to=None, metadata=None):
        self.sent.append(text)
        return SendResult(message_id=str(len(self.sent)))


class HistoryEcho(EchoAgent):
    """The echo agent, remembering (role, content) of the history each turn saw."""

    def __init__(self, fail_on: str | None = None):
        super().__init__()
        self.seen: list[list[tuple[str, str]]] = []
        self.fail_on = fail_on

    async def _generate(self, context, history: list[dict[str, Any]], message, system_context):
        self.seen.append([(m["role"], m["content"]) for m in history])
        if message == self.fail_on:
            raise AgentError("backend down")
        return await super()._generate(context, history, message, system_context)


def dm():
    return SessionSource("cachechat", "7", chat_type="dm", user_id="u7", user_name="Kim")


async def start(tmp_path, agent, cache=None, **config):
    config.setdefault("platforms", {"cachechat": {"allow_all": True}})
    app = GatewayApp(GatewayConfig(home=tmp_path, **config), adapters={"cachechat": RecordingAdapter()},
                     agent=agent, watcher=False)
    await app.start()
    if cache is not None:
        app.runner.deps.agent_cache = cache
    return app, app.runner.deps.agent_cache


async def say(app, text):
    await app.runner.handle(MessageEvent(source=dm(), text=text))
    await app.runner.join()


async def stored(app):
    entry = await app.store.get_entry(KEY)
    return entry, await app.store.load_transcript(entry.session_id)


async def test_turns_reuse_the_live_transcript_which_equals_the_stored_one(tmp_path):
    agent = HistoryEcho()
    app, cache = await start(tmp_path, agent)
    try:
        for text in ("one", "two", "three"):
            await say(app, text)
        assert agent.seen == [
            [],
            [("user", "one"), ("assistant", "echo: one")],
            [("user", "one"), ("assistant", "echo: one"), ("user", "two"), ("assistant", "echo: two")]]
        # One load (the first turn's miss), then hits.
        assert (cache.stats.misses, cache.stats.hits) == (1, 2)
        entry, transcript = await stored(app)
        live = cache.peek(KEY)
        assert live.session_id == entry.session_id
        assert live.messages == transcript  # same dicts as load_transcript, timestamps included
        assert len(transcript) == 6 and live.transcript_persistence_caught_up() and not live.mid_turn
        # Echo usage over the whole history, unchanged by incremental counting:
        # turn 3 = one(1) + echo: one(2) + two(1) + echo: two(2) + three(1) = 7.
        assert entry.last_prompt_tokens == 7
        assert entry.input_tokens == 1 + 4 + 7
    finally:
        await app.stop()


async def test_evicted_session_rebuilds_its_full_history_from_the_store(tmp_path):
    write = lambda path, text: (path.parent.mkdir(parents=True, exist_ok=True), path.write_text(text))
    write(tmp_path / "p/self/cgroup", "0::/gw\n")
    write(tmp_path / "cg/gw/memory.high", f"{100 * MiB}\n")
    write(tmp_path / "cg/gw/memory.stat", f"anon {300 * MiB}\n")
    probe = MemoryProbe(tmp_path / "cg", tmp_path / "p/self", tmp_path / "p/meminfo")
    cache = AgentCache(protect_recent=0, probe=probe, trim=lambda: True)
    agent = HistoryEcho()
    app, cache = await start(tmp_path / "home", agent, cache)
    try:
        await say(app, "one")
        await say(app, "two")
        report = cache.sweep_under_pressure()  # 300 MiB anon over the 100 MiB memory.high
        assert report.evicted == (KEY,) and KEY not in cache
        await say(app, "three")
        assert agent.seen[-1] == [("user", "one"), ("assistant", "echo: one"),
                                  ("user", "two"), ("assistant", "echo: two")]
        assert (cache.stats.misses, cache.stats.hits) == (2, 1)
        entry, transcript = await stored(app)
        assert cache.peek(KEY).messages == transcript and len(transcript) == 6
        assert entry.last_prompt_tokens == 7  # the rebuilt history is counted in full
    finally:
        await app.stop()


async def test_new_starts_from_an_empty_history_and_replaces_the_entry(tmp_path):
    agent = HistoryEcho()
    app, cache = await start(tmp_path, agent)
    try:
        await say(app, "hi there")
        old = cache.peek(KEY).session_id
        await say(app, "/new")
        await say(app, "again")
        assert agent.seen[-1] == []
        entry, transcript = await stored(app)
        assert entry.session_id != old
        live = cache.peek(KEY)
        assert live.session_id == entry.session_id and live.messages == transcript
        assert [(m["role"], m["content"]) for m in transcript] == [("user", "again"), ("assistant", "echo: again")]
        assert cache.stats.evictions == {"replaced": 1}
        assert entry.last_prompt_tokens == 1
    finally:
        await app.stop()


async def test_a_failed_turn_keeps_the_user_message_in_the_live_transcript(tmp_path):
    agent = HistoryEcho(fail_on="boom")
    app, cache = await start(tmp_path, agent)
    try:
        await say(app, "boom")
        await say(app, "after")
        assert agent.seen[-1] == [("user", "boom")]
        _entry, transcript = await stored(app)
        assert [(m["role"], m["content"]) for m in transcript] == [
            ("user", "boom"), ("user", "after"), ("assistant", "echo: after")]
        assert cache.peek(KEY).messages == transcript
        assert (cache.stats.misses, cache.stats.hits) == (1, 1)
    finally:
        await app.stop()


async def test_housekeeping_tick_applies_the_idle_ttl_and_the_pressure_sweep(tmp_path):
    clock = SecondsClock(0.0)
    cache = AgentCache(idle_ttl_secs=3600, memory_high_mb="off", clock=clock)
    app, cache = await start(tmp_path, HistoryEcho(), cache)
    watcher = Watcher(app.pm, app.config, app.store, app=app)
    try:
        await say(app, "hello")
        clock.t = 3599.0
        result = dict(await watcher.tick())["builtin:agent_cache_pressure"]
        assert result == {"idle": [], "pressure": [], "skipped": [], "trimmed": False}
        clock.t = 3600.0
        result = dict(await watcher.tick())["builtin:agent_cache_pressure"]
        assert result == {"idle": [KEY], "pressure": [], "skipped": [], "trimmed": False}
        # Released softly: the transcript stays, and the next turn rebuilds it.
        _entry, transcript = await stored(app)
        assert [m["content"] for m in transcript] == ["hello", "echo: hello"]
        await say(app, "back")
        assert app.runner.deps.agent.seen[-1] == [("user", "hello"), ("assistant", "echo: hello")]
    finally:
        await app.stop()


async def test_housekeeping_tick_runs_the_pressure_sweep_with_the_configured_budget(tmp_path):
    (tmp_path / "p/self").mkdir(parents=True)
    (tmp_path / "p/self/cgroup").write_text("0::/\n")
    (tmp_path / "p/self/statm").write_text(statm(3072))  # 3 MiB anonymous
    probe = MemoryProbe(tmp_path / "cg", tmp_path / "p/self", tmp_path / "p/meminfo")
    trims = []
    cache = AgentCache(memory_high_mb=2, protect_recent=0, probe=probe, trim=lambda: trims.append(1) or True)
    app, cache = await start(tmp_path / "home", HistoryEcho(), cache)
    watcher = Watcher(app.pm, app.config, app.store, app=app)
    try:
        await say(app, "hello")
        result = dict(await watcher.tick())["builtin:agent_cache_pressure"]
        assert result == {"idle": [], "pressure": [KEY], "skipped": [], "trimmed": True}
        assert trims == [1]
    finally:
        await app.stop()


def test_echo_counts_only_what_was_appended_since_the_previous_turn():
    agent = EchoAgent()
    history = [{"role": "user", "content": "a b c"}, {"role": "assistant", "content": "echo: a b c"}]
    assert agent.history_tokens("k", history) == 3 + 4
    history += [{"role": "user", "content": "d"}, {"role": "assistant", "content": "echo: d"}]
    assert agent.history_tokens("k", history) == 7 + 1 + 2
    # The earlier messages are not counted again: an in-place edit (which the pipeline never
    # makes) goes unseen, which shows only the two new messages were read.
    history[0]["content"] = "a b c d e f"
    history.append({"role": "user", "content": "x"})
    assert agent.history_tokens("k", history) == 10 + 1
    # A reload from the store after an eviction (new dicts, the same values) extends what was
    # counted: only what follows is read (the edit above still goes unseen).
    reloaded = [dict(m) for m in history] + [{"role": "assistant", "content": "echo: x"}]
    assert agent.history_tokens("k", reloaded) == 11 + 2
    # Another first message (a compressed transcript) is counted in full.
    compressed = [{"role": "system", "content": "summary of it all"}] + reloaded[2:]
    assert agent.history_tokens("k", compressed) == sum(count_tokens(m["content"]) for m in compressed) == 10
    assert agent.history_tokens("k", []) == 0
    assert agent.history_tokens("other", history[:2]) == 6 + 4


class BlockingEcho(HistoryEcho):
    """Blocks on the message "wait" until cancelled."""

    def __init__(self):
        super().__init__()
        self.started = asyncio.Event()

    async def _generate(self, context, history, message, system_context):
        if message == "wait":
            self.started.set()
            await asyncio.Event().wait()
        return await super()._generate(context, history, message, system_context)


async def test_a_cancelled_turn_drops_the_entry_and_the_next_turn_rebuilds_from_the_store(tmp_path):
    agent = BlockingEcho()
    app, cache = await start(tmp_path, agent)
    try:
        await say(app, "first")
        task = asyncio.create_task(run_turn(app.runner.deps, KEY, MessageEvent(source=dm(), text="wait")))
        await asyncio.wait_for(agent.started.wait(), 10)
        assert cache.peek(KEY).mid_turn
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert KEY not in cache and cache.stats.evictions == {"invalidated": 1}
        await say(app, "next")
        # "wait" was recorded before the agent ran; the rebuilt history has it.
        assert agent.seen[-1] == [("user", "first"), ("assistant", "echo: first"), ("user", "wait")]
        _entry, transcript = await stored(app)
        assert cache.peek(KEY).messages == transcript
    finally:
        await app.stop()
