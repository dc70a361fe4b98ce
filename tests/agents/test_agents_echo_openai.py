"""Agents: echo's deterministic rule, interruption, and the openai agent
against a fake chat-completions server on 127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest

from hermes_core.agents import AgentError, AgentInterrupted, EchoAgent, create_agent
from hermes_core.agents.base import Agent, AgentReply
from hermes_core.agents.openai_agent import OpenAIAgent
from hermes_core.model import SessionContext, SessionSource, TokenUsage
from hermes_core.settings import GatewayConfig

SOURCE = SessionSource("local", "terminal", chat_type="dm", user_id="alice")
CONTEXT = SessionContext(source=SOURCE, session_key="agent:main:local:dm:terminal", session_id="s1")


async def test_echo_reply_and_usage_are_deterministic():
    agent = EchoAgent()
    history = [{"role": "user", "content": "one two"}, {"role": "assistant", "content": "echo: one two"}]
    reply = await agent.run_turn(CONTEXT, history, "hello there world")
    assert reply.text == "echo: hello there world"
    # input: 2 + 3 (history) + 3 (message); output: "echo:", "hello", "there", "world"
    assert reply.usage == TokenUsage(input_tokens=8, output_tokens=4, total_tokens=12,
                                     estimated_cost_usd=0.0, cost_status="exact")


def test_create_agent_selects_backend(tmp_path):
    assert isinstance(create_agent(GatewayConfig(home=tmp_path)), EchoAgent)
    agent = create_agent(GatewayConfig(home=tmp_path, agent={"backend": "openai"}))
    assert isinstance(agent, OpenAIAgent)
    asyncio.run(agent.aclose())


class _BlockingAgent(Agent):
    def __init__(self):
        super().__init__()
        self.entered = asyncio.Event()

    async def _generate(self, context, history, message, system_context):
        self.entered.set()
        await asyncio.Event().wait()
        return AgentReply("never", TokenUsage())


async def test_interrupt_ends_running_turn_with_agent_interrupted():
    agent = _BlockingAgent()
    turn = asyncio.create_task(agent.run_turn(CONTEXT, [], "hi"))
    await agent.entered.wait()
    assert agent.busy is True
    assert agent.interrupt("agent:main:local:dm:terminal") is True
    with pytest.raises(AgentInterrupted):
        await turn
    assert agent.busy is False
    assert agent.interrupt() is False


async def test_interrupt_of_other_session_leaves_turn_running():
    agent = _BlockingAgent()
    turn = asyncio.create_task(agent.run_turn(CONTEXT, [], "hi"))
    await agent.entered.wait()
    assert agent.interrupt("agent:main:telegram:dm:1") is False
    assert not turn.done()
    agent.interrupt()
    with pytest.raises(AgentInterrupted):
        await turn


async def test_an_interrupted_turn_leaves_its_task_free_of_cancellation():
    """The caller's task goes on after AgentInterrupted with no cancellation requested of it
    (the runner's worker runs the session's next turn in the same task)."""
    agent = _BlockingAgent()

    async def caller():
        with pytest.raises(AgentInterrupted):
            await agent.run_turn(CONTEXT, [], "hi")
        return asyncio.current_task().cancelling()

    task = asyncio.create_task(caller())
    await agent.entered.wait()
    assert agent.interrupt("agent:main:local:dm:terminal") is True
    assert await task == 0
    assert agent.busy is False


async def test_a_shutdown_cancellation_beside_an_interrupt_stays_a_cancellation():
    agent = _BlockingAgent()
    turn = asyncio.create_task(agent.run_turn(CONTEXT, [], "hi"))
    await agent.entered.wait()
    agent.interrupt("agent:main:local:dm:terminal")
    turn.cancel()  # e.g. the shutdown drain, before the turn saw the interrupt
    with pytest.raises(asyncio.CancelledError):
        await turn
    assert turn.cancelled() is True


def _openai_config(tmp_path, base_url):
    return GatewayConfig(home=tmp_path, agent={"backend": "openai", "openai": {
        "base_url": base_url, "model": "test-model", "api_key": "sk-test-123",
        "max_retries": 0, "request_timeout_s": 10, "system_prompt": "You are terse."}})


async def test_openai_agent_request_body_and_usage_mapping(tmp_path, fake_chat_server):
    agent = create_agent(_openai_config(tmp_path, fake_chat_server.base_url))
    history = [{"role": "user", "content": "earlier", "timestamp": "2026-01-01T00:00:00+00:00",
                "platform_message_id": "7"},
               {"role": "assistant", "content": "noted"}]
    try:
        reply = await agent.run_turn(CONTEXT, history, "what now?",
                                     system_context="## Current Session Context\nSource: local")
    finally:
        await agent.aclose()
    assert reply.text == "fake reply"
    assert reply.usage == TokenUsage(input_tokens=11, output_tokens=5, cache_read_tokens=3,
                                     cache_write_tokens=0, total_tokens=16, cost_status="unknown")
    [body] = fake_chat_server.requests
    assert body["model"] == "test-model"
    assert body["messages"] == [
        {"role": "system", "content": "You are terse.\n\n## Current Session Context\nSource: local"},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "what now?"},
    ]
    assert fake_chat_server.headers[0]["Authorization"] == "Bearer sk-test-123"


async def test_openai_agent_without_cached_details(tmp_path, fake_chat_server):
    fake_chat_server.usage = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    agent = create_agent(_openai_config(tmp_path, fake_chat_server.base_url))
    try:
        reply = await agent.run_turn(CONTEXT, [], "hi")
    finally:
        await agent.aclose()
    assert reply.usage == TokenUsage(input_tokens=4, output_tokens=2, cache_read_tokens=0,
                                     total_tokens=6, cost_status="unknown")


async def test_openai_agent_server_error_is_agent_error(tmp_path, fake_chat_server):
    fake_chat_server.status = 500
    agent = create_agent(_openai_config(tmp_path, fake_chat_server.base_url))
    try:
        with pytest.raises(AgentError) as err:
            await agent.run_turn(CONTEXT, [], "hi")
        assert str(err.value) == f"chat-completions server at {fake_chat_server.base_url} answered HTTP 500: boom"
    finally:
        await agent.aclose()


async def test_openai_agent_unreachable_server_is_named_in_words(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    agent = create_agent(_openai_config(tmp_path, base_url))
    try:
        with pytest.raises(AgentError) as err:
            await agent.run_turn(CONTEXT, [], "hi")
        assert str(err.value) == f"cannot reach the chat-completions server at {base_url}: connection refused"
    finally:
        await agent.aclose()


async def test_openai_agent_a_200_that_is_not_a_completion_is_agent_error(tmp_path, fake_chat_server):
    fake_chat_server.html = True
    agent = create_agent(_openai_config(tmp_path, fake_chat_server.base_url))
    try:
        with pytest.raises(AgentError) as err:
            await agent.run_turn(CONTEXT, [], "hi")
        assert str(err.value) == (f"chat-completions server at {fake_chat_server.base_url} answered with "
                                  "something that is not a chat completion (text, not JSON)")
    finally:
        await agent.aclose()


@pytest.mark.parametrize("body, what", [
    # A JSON content type over a body that is not JSON (a proxy that cut it short).
    (b'{"id": "chatcmpl-1", "choices": [{"index"', "not valid JSON"),
    (b"\xff\xfe not even text", "not valid JSON"),
    # JSON, but the reply's content is no text.
    (b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": 42}}]}',
     "its message content is int, not text"),
    (b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": {"text": "hi"}}}]}',
     "its message content is dict, not text"),
    (b'{"choices": [1]}', "its choice has no message"),
    (b'{"choices": [{"index": 0, "message": "hi"}]}', "its choice has no message"),
    (b'{"choices": {"0": {"message": {"role": "assistant", "content": "hi"}}}}', "its choices are dict, not a list"),
    (b'{"choices": 5}', "its choices are int, not a list"),
    (b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}], "usage": "lots"}',
     "its usage is str, not the usage's fields"),
])
async def test_openai_agent_a_200_json_body_that_is_not_a_completion_is_agent_error(
        tmp_path, fake_chat_server, body, what):
    # docs/behaviour.md §0: a failing model backend is an AgentError (the chat gets
    # `agent_failure_notice`), never a gateway failure with a traceback.
    fake_chat_server.raw_json_body = body
    agent = create_agent(_openai_config(tmp_path, fake_chat_server.base_url))
    try:
        with pytest.raises(AgentError) as err:
            await agent.run_turn(CONTEXT, [], "hi")
        assert str(err.value) == (f"chat-completions server at {fake_chat_server.base_url} answered with "
                                  f"something that is not a chat completion ({what})")
    finally:
        await agent.aclose()


async def test_openai_agent_interrupt_cancels_the_request(tmp_path, fake_chat_server):
    fake_chat_server.hang = True
    agent = create_agent(_openai_config(tmp_path, fake_chat_server.base_url))
    try:
        turn = asyncio.create_task(agent.run_turn(CONTEXT, [], "slow question"))
        await asyncio.wait_for(fake_chat_server.started.wait(), 10)
        assert agent.interrupt() is True
        with pytest.raises(AgentInterrupted):
            await asyncio.wait_for(turn, 10)
        # The server sees the client go away: the HTTP request really was abandoned.
        await asyncio.wait_for(fake_chat_server.cancelled.wait(), 10)
    finally:
        await agent.aclose()


async def test_openai_agent_takes_a_steered_follow_up_at_its_next_request_boundary(tmp_path, fake_chat_server):
    agent = create_agent(_openai_config(tmp_path, fake_chat_server.base_url))
    hold = fake_chat_server.hold = asyncio.Event()
    try:
        assert agent.steer(CONTEXT.session_key, "too early") is False  # no turn is running
        turn = asyncio.create_task(agent.run_turn(CONTEXT, [], "plan a trip"))
        await asyncio.wait_for(fake_chat_server.started.wait(), 10)
        assert agent.steer(CONTEXT.session_key, "by train, please") is True
        hold.set()
        reply = await asyncio.wait_for(turn, 10)
        assert agent.take_steered(CONTEXT.session_key) == 1
        assert agent.take_steered(CONTEXT.session_key) == 0
    finally:
        await agent.aclose()
    first, second = fake_chat_server.requests
    assert first["messages"][1:] == [{"role": "user", "content": "plan a trip"}]
    assert second["messages"][1:] == [{"role": "user", "content": "plan a trip"},
                                      {"role": "assistant", "content": "fake reply"},
                                      {"role": "user", "content": "by train, please"}]
    assert reply.text == "fake reply"
    # Both requests' tokens are counted.
    assert reply.usage == TokenUsage(input_tokens=22, output_tokens=10, cache_read_tokens=6,
                                     total_tokens=32, cost_status="unknown")


async def test_echo_cannot_steer():
    agent = EchoAgent()
    assert agent.can_steer is False
    assert agent.steer(CONTEXT.session_key, "more") is False


async def test_openai_agent_keeps_the_reasoning_fields_of_the_reply(tmp_path, fake_chat_server):
    fake_chat_server.message_extra = {"reasoning_content": "The user wants a short answer.",
                                      "reasoning_details": [{"type": "reasoning.text", "text": "short"}]}
    agent = create_agent(_openai_config(tmp_path, fake_chat_server.base_url))
    try:
        reply = await agent.run_turn(CONTEXT, [], "hi")
    finally:
        await agent.aclose()
    assert reply.reasoning == {"reasoning_content": "The user wants a short answer.",
                               "reasoning_details": [{"type": "reasoning.text", "text": "short"}]}


async def test_openai_agent_drops_a_reasoning_text_field_that_is_not_text_and_keeps_the_reply(
        tmp_path, fake_chat_server, caplog):
    # docs/configuration.md `[agent.openai]`: `reasoning` and `reasoning_content` are the model's
    # reasoning as text; another type is dropped with a warning naming the field, and the reply,
    # which is valid, is still the turn's answer (docs/behaviour.md §0, nothing accepted is lost).
    fake_chat_server.message_extra = {"reasoning": {"a": 1}, "reasoning_content": 5,
                                      "reasoning_details": [{"type": "reasoning.text", "text": "short"}]}
    agent = create_agent(_openai_config(tmp_path, fake_chat_server.base_url))
    try:
        reply = await agent.run_turn(CONTEXT, [], "hi")
    finally:
        await agent.aclose()
    assert (reply.text, reply.reasoning) == ("fake reply", {"reasoning_details": [{"type": "reasoning.text",
                                                                                  "text": "short"}]})
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"chat-completions server at {fake_chat_server.base_url} sent the reply's reasoning field "
        f"'{name}' as {kind}, not text; the field is dropped, the reply kept"
        for name, kind in (("reasoning", "dict"), ("reasoning_content", "int"))]


async def test_openai_agent_summary_request_and_its_prompt_tokens(tmp_path, fake_chat_server):
    fake_chat_server.reply = "They planned a trip."
    agent = create_agent(_openai_config(tmp_path, fake_chat_server.base_url))
    older = [{"role": "user", "content": "plan a trip"}, {"role": "assistant", "content": "where to?"}]
    try:
        summary = await agent.summarize(CONTEXT, older)
    finally:
        await agent.aclose()
    assert summary.text == "They planned a trip."
    assert summary.usage.input_tokens == 11  # the server's prompt_tokens
    [body] = fake_chat_server.requests
    assert body["messages"] == [
        {"role": "system", "content": "You compress conversations. Summarise the conversation you are given so "
                                      "that it can replace it: keep facts, decisions, names, numbers and open "
                                      "questions; be brief."},
        {"role": "user", "content": "plan a trip"},
        {"role": "assistant", "content": "where to?"},
        {"role": "user", "content": "Write the summary of the conversation above now, in the language it was "
                                    "held in."}]


async def test_echo_summary_is_deterministic():
    messages = [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "echo: u1"},
                {"role": "user", "content": "a very long message that goes on and on past forty characters"}]
    summary = await EchoAgent().summarize(CONTEXT, messages)
    assert summary.text == ("Summary of 3 earlier message(s). The user wrote: u1 | "
                            "a very long message that goes on and on…")
    assert (summary.usage.input_tokens, summary.usage.output_tokens) == (15, 19)


def test_the_agent_and_the_store_name_the_reasoning_fields_once():
    """docs/behaviour.md §3 (`messages.reasoning`): the fields an agent takes from a reply are the
    ones the store keeps, one tuple in the model that both import (the agents import no store)."""
    from hermes_core.agents import openai_agent
    from hermes_core.model.message import REASONING_KEYS
    from hermes_core.store import rows

    assert REASONING_KEYS == ("reasoning", "reasoning_content", "reasoning_details", "codex_reasoning_items")
    assert (openai_agent.REASONING_KEYS, rows.REASONING_KEYS) == (REASONING_KEYS, REASONING_KEYS)
    assert openai_agent.REASONING_KEYS is REASONING_KEYS is rows.REASONING_KEYS
