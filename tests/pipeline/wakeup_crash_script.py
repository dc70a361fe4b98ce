"""A gateway process for the wake-up crash test (run as a script, not collected).

Usage: python wakeup_crash_script.py HOME

Starts a GatewayApp on HOME whose agent never finishes a turn (and does not give up on an
interrupt), sends "A" from chat 100 of `testchat`, posts a wake-up bound to the session A runs in
(`app.background.post_wakeup`), then sends "/new" — which waits behind the turn that will not
end, with the wake-up queued behind it. Then it prints `{"session_id": <A's session>}` and waits
to be killed (SIGKILL).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from hermes_core.agents.base import Agent, AgentReply
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent, SessionSource, TokenUsage
from hermes_core.sdk.adapter import BaseAdapter, SendResult
from hermes_core.settings import GatewayConfig
from hermes_core.types import AdapterSpec


class SilentAdapter(BaseAdapter):
    spec = AdapterSpec(name="testchat", label="Test chat", pii_safe=True, max_message_length=4000)

    async def start(self):
        return None

    async def stop(self):
        return None

    async def send(self, target, text, *, reply_to=None, metadata=None):
        return SendResult(message_id="sent")


class StuckAgent(Agent):
    """A turn that never ends: an interrupt is ignored (the process is killed meanwhile)."""

    def __init__(self):
        super().__init__()
        self.started = asyncio.Event()

    async def _generate(self, context, history, message, system_context):
        self.started.set()
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue
        return AgentReply("unreachable", TokenUsage())


async def main(home: str) -> None:
    agent = StuckAgent()
    app = GatewayApp(GatewayConfig(home=Path(home), platforms={"testchat": {"allow_all": True}}),
                     adapters={"testchat": SilentAdapter(None)},
                     agent=agent, watcher=False)
    await app.start()
    source = SessionSource("testchat", "100", chat_type="dm", user_id="u100", user_name="Ann")
    await app.runner.handle(MessageEvent(source=source, text="A", message_id="m1"))
    await agent.started.wait()
    session_id = (await app.store.get_entry(app.store.session_key(source))).session_id
    await app.background.post_wakeup(source, "wake: report ready")
    await app.runner.handle(MessageEvent(source=source, text="/new", message_id="m2"))
    print(json.dumps({"session_id": session_id}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
