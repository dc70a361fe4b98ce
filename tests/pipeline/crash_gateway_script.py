"""A small gateway process for the ledger crash tests (run as a script, not collected).

Usage: python crash_gateway_script.py HOME MODE [TEXT:MESSAGE_ID ...]

Starts a GatewayApp on HOME with the echo agent and a `testchat` adapter that prints every send
as one JSON line `{"chat", "text", "reply_to"}` on stdout. After start-up recovery ran, each
argument is handed to the runner as a message from chat 100 and answered. MODE:
  kill-in-send  the first send kills this process with SIGKILL before it is acknowledged
                (the reply is saved and its obligation is 'attempting');
  kill-in-send-queued  the same, but every message is accepted before the first turn runs
                (`busy_input_mode = "queue"`): the later ones are still waiting at the kill;
  kill-in-second-send  the first reply is sent, the second send kills: the second message
                came to an idle session, so it was accepted with its turn (docs/behaviour.md §12);
  kill-in-third-send  the same with the third send (a command's answer, or the reply of the
                turn a command began: `/undo`, `/retry`, docs/behaviour.md §11);
  kill-in-record  the reply is sent, then the outcome recorder's write kills the process before
                'delivered' is recorded (docs/behaviour.md §12 "'delivered' off the session's path");
  serve         answer, then stop cleanly.
Compression keeps the last 2 messages verbatim (`agent.compression.keep_recent`), so a `/compress`
after two turns summarises the first one (docs/behaviour.md §11).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from hermes_core.agents import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent, SessionSource
from hermes_core.sdk.adapter import BaseAdapter, SendResult
from hermes_core.settings import GatewayConfig
from hermes_core.types import AdapterSpec


class PrintingAdapter(BaseAdapter):
    spec = AdapterSpec(name="testchat", label="Test chat", pii_safe=True, max_message_length=4000)

    def __init__(self, kill_at_send: int | None):
        super().__init__(None)
        self.kill_at_send = kill_at_send  # the 1-based send that kills the process; None: none
        self.sends = 0

    async def start(self):
        return None

    async def stop(self):
        return None

    async def send(self, target, text, *, reply_to=None, metadata=None):
        self.sends += 1
        if self.sends == self.kill_at_send:
            os.kill(os.getpid(), signal.SIGKILL)
        print(json.dumps({"chat": target.chat_id, "text": text, "reply_to": reply_to}), flush=True)
        return SendResult(message_id="sent")


KILL_AT_SEND = {"kill-in-send": 1, "kill-in-send-queued": 1, "kill-in-second-send": 2, "kill-in-third-send": 3}


async def main(home: str, mode: str, messages: list[str]) -> None:
    queued = mode == "kill-in-send-queued"
    config = GatewayConfig(home=Path(home), platforms={"testchat": {"allow_all": True}},
                           core={"busy_input_mode": "queue" if queued else "interrupt"},
                           agent={"compression": {"keep_recent": 2}})
    app = GatewayApp(config, adapters={"testchat": PrintingAdapter(KILL_AT_SEND.get(mode))},
                     agent=EchoAgent(), watcher=False)
    await app.start()
    if mode == "kill-in-record":
        async def killing_finish_deliveries(outcomes):
            os.kill(os.getpid(), signal.SIGKILL)

        app.store.finish_deliveries = killing_finish_deliveries
    try:
        await app.runner.join()
        source = SessionSource("testchat", "100", chat_type="dm", user_id="u100", user_name="Ann")
        for item in messages:
            text, _, message_id = item.rpartition(":")
            await app.runner.handle(MessageEvent(source=source, text=text, message_id=message_id or None))
            if not queued:
                await app.runner.join()
        await app.runner.join()
    finally:
        await app.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
