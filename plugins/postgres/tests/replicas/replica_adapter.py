"""The adapter of the fake platform the replica tests run (imported inside each gateway
subprocess through `[platforms.fake] adapter`): a shared-ingress platform (like webhooks: any
replica may receive) that long-polls `replica_platform.FakePlatform` on 127.0.0.1, acknowledges
each message only after `emit` returned, and sends replies back to it."""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from hermes_core.sdk import AdapterSpec, BaseAdapter, MessageEvent, PlatformSettings, SendResult, SessionSource

log = logging.getLogger(__name__)


class FakeSettings(PlatformSettings):
    base_url: str
    replica: str


class PolledAdapter(BaseAdapter):
    spec = AdapterSpec(name="fake", label="Fake", pii_safe=True, max_message_length=4096, ingress="shared",
                       settings_model=FakeSettings)

    async def start(self) -> None:
        self._http = aiohttp.ClientSession(base_url=self.settings.base_url)
        self._task = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> None:
        task = getattr(self, "_task", None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def aclose(self) -> None:
        await self.stop()
        await self._http.close()

    async def _poll(self) -> None:
        while True:
            try:
                async with self._http.get("/poll", params={"replica": self.settings.replica}) as response:
                    batch = await response.json()
                for item in batch:
                    source = SessionSource(platform="fake", chat_id=item["chat"], user_id=item["user"], chat_type="dm")
                    await self.emit(MessageEvent(source=source, text=item["text"], message_id=item["id"]))
                    async with self._http.post("/ack", json={"id": item["id"]}):
                        pass
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the platform redelivers what was not acknowledged
                log.warning("fake platform poll failed: %s", exc)
                await asyncio.sleep(0.1)

    async def send(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                   metadata: dict | None = None) -> SendResult:
        async with self._http.post("/send", json={"chat": target.chat_id, "text": text, "reply_to": reply_to,
                                                  "replica": self.settings.replica}) as response:
            response.raise_for_status()
            return SendResult((await response.json())["id"])


class SingleReceiverAdapter(PolledAdapter):
    """The same platform as a single-receiver one (like Telegram long polling): only the
    replica holding its ingress lease may poll."""

    spec = AdapterSpec(name="fake", label="Fake", pii_safe=True, max_message_length=4096,
                       ingress="single_receiver", settings_model=FakeSettings)
