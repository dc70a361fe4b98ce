"""`TelegramAdapter`: python-telegram-bot 22.x, long polling or webhook (docs/adapters.md §1, docs/behaviour.md §4).

Receiving. PTB's `Application` is built with `ApplicationBuilder().token(…).base_url(…)` and
initialised (getMe gives the bot id used to drop the bot's own messages). PTB's own `Updater` is
*not* used: it confirms updates to Telegram (next getUpdates offset) as soon as they are queued,
before any handler ran, so a crash loses them; and its webhook server answers 200 before the
handler ran. Instead:

* polling: `getUpdates` through the PTB bot's request layer (`Bot.do_api_request`, raw JSON, so
  one malformed update cannot fail a whole batch in PTB's object parsing); each update is mapped
  and emitted in order, and the offset moves past an update only after `emit` returned (the
  gateway durably accepted it) or the update was deliberately skipped. Updates received while the
  adapter was stopped or disconnected stay queued at Telegram and arrive on the next start;
  redeliveries are dropped by the core's persisted inbound dedupe on (chat_id, message_id).
* webhook: an aiohttp listener answers 200 only after `emit` returned; on failure it answers 500
  so Telegram redelivers. The webhook is (re)registered with `setWebhook` at start and left in
  place at stop, so Telegram keeps queueing while the gateway is down.

Sending (`send`, one chunk per call, the BaseAdapter contract): to the right topic (General
`"1"` → no `message_thread_id`), retry once without the thread on "message thread not found",
resend as plain text when MarkdownV2 is refused ("can't parse entities"), follow a group →
supergroup migration (`ChatMigrated`, recorded as an identity alias: `aliases.py`), and
translate a 429 into `hermes_core.sdk.RetryAfter` so the core's delivery layer (`send_chunks`)
waits exactly `retry_after` and retries, in per-chat order. `send_text` does the whole reply (chunking at 4096 UTF-16 units with code fences closed and
reopened, per-chat order, 429 waits) with the SDK helpers, for callers outside the delivery layer.

The bot token is a SecretStr and is scrubbed from every log line this adapter writes, from
httpx's request log lines and from errors raised at start.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import warnings
from typing import Any

from aiohttp import web
from pydantic import BaseModel
from telegram import Bot, BotCommand, ReplyParameters
from telegram.error import (BadRequest, ChatMigrated, InvalidToken, NetworkError, RetryAfter as TgRetryAfter,
                            TelegramError)
from telegram.ext import Application, ApplicationBuilder
from telegram.warnings import PTBDeprecationWarning, PTBUserWarning

from hermes_core.sdk import (CAP_EDIT, CAP_MEDIA, CAP_THREADS, CAP_TYPING, CAP_WEBHOOK, COMMAND_MENU, AdapterSpec,
                             BaseAdapter, ChatSendQueue, QueuedChange, RetryAfter, RetryPolicy, SendResult,
                             SessionSource, chunk_text, describe_failure, offer_change, send_chunks)

from .aliases import IMPORTED_SUFFIX, LEGACY_FILE_NAME, ChatMigrations, read_legacy_file
from .format import to_markdown_v2
from .mapping import (EDIT_KINDS, GENERAL_TOPIC_ID, MalformedUpdate, map_update, migration_of, reply_anchor,
                      update_kind)
from .settings import TelegramSettings

log = logging.getLogger(__name__)

MAX_TEXT_UTF16 = 4096  # telegram.constants.MessageLimit.MAX_TEXT_LENGTH, counted in UTF-16 units
ALLOWED_UPDATES = ["message", "channel_post", "edited_message", "edited_channel_post"]
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
STOP_GRACE_S = 10.0  # how long `stop` lets an update in hand reach the gateway

# Loggers that print Bot API URLs (which contain the token): httpx's request lines and PTB's
# "Set Bot API URL" debug lines. Logger filters do not apply to child loggers, hence the list.
# Loggers whose records may carry the token (a filter on a logger sees only that logger's own
# records, so each is named): httpx logs request URLs; PTB's request layer logs a response it
# cannot parse verbatim, and a proxy's error page may echo the URL path with the token in it.
TOKEN_LOGGERS = ("httpx", "telegram", "telegram.Bot", "telegram.ext", "telegram.ext.ExtBot",
                 "telegram.ext.Application", "telegram.ext.Updater", "telegram.request",
                 "telegram.request.BaseRequest", "telegram.request.HTTPXRequest")


class TelegramStartError(RuntimeError):
    """The adapter could not connect (bad token, unreachable API, bad webhook settings).
    The message never contains the token."""


class _TokenScrubber(logging.Filter):
    """Replace the bot token in log records of the logger it is attached to (httpx logs full
    request URLs, and the Bot API puts the token in the URL path)."""

    def __init__(self, token: str):
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.token:
            return True
        message = record.getMessage()
        if self.token in message:
            record.msg = message.replace(self.token, "<telegram-token>")
            record.args = ()
        return True


def _retry_seconds(exc: TgRetryAfter) -> float:
    """PTB 22 gives `retry_after` as int seconds and announced a move to timedelta: read both
    (and silence the announcement, which fires on every read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return float(value)


class TelegramAdapter(BaseAdapter):
    """Telegram platform adapter (entry point `hermes_core.adapters: telegram`).

    Args:
        settings: a `TelegramSettings` (or a dict validated into one); `bot_token` is required to
            `start`.
        on_message: the gateway's inbound handler (see `BaseAdapter`).

    Group → supergroup migrations are recorded with `record_alias` (new id → the group's first
    id); `migrations` maps old ids to new ones for sending. At `start()` a legacy
    `chat_aliases.json` in `data_dir` is imported into the store once and renamed aside.
    """

    spec = AdapterSpec(
        name="telegram",
        label="Telegram",
        pii_safe=True,
        max_message_length=MAX_TEXT_UTF16,
        length_unit="utf16",
        capabilities=frozenset({CAP_THREADS, CAP_EDIT, CAP_TYPING, CAP_MEDIA, CAP_WEBHOOK}),
        settings_model=TelegramSettings,
        required_env=("HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN",),
        install_hint="pip install hermes-gateway-telegram",
    )

    def __init__(self, settings: BaseModel | dict | None = None, *, on_message=None, data_dir=None):
        if settings is None:
            settings = TelegramSettings()
        elif isinstance(settings, dict):
            settings = TelegramSettings.model_validate(settings)
        elif not isinstance(settings, TelegramSettings):
            settings = TelegramSettings.model_validate(settings.model_dump())
        super().__init__(settings, on_message=on_message, data_dir=data_dir)
        self.settings: TelegramSettings = settings
        self.migrations = ChatMigrations()
        self._app: Application | None = None
        self._poll_task: asyncio.Task | None = None
        self._runner: web.AppRunner | None = None
        self._scrubber: _TokenScrubber | None = None
        self._offset: int | None = None
        self._started = False
        self._stopping = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._last_error: str | None = None
        self._emit_failures: dict[int, int] = {}
        self._dead_threads: set[tuple[str, str]] = set()
        self._send_queue = ChatSendQueue()
        self.bot_id: int | None = None
        self.webhook_address: tuple[str, int] | None = None

    # ---- helpers -----------------------------------------------------------------------------

    async def _chat_migrated(self, old_chat_id: str, new_chat_id: str, source: str) -> None:
        """Remember a migration for sending and record the new id as an alias of the old one.

        Raises:
            Exception: the alias could not be stored (the caller decides whether to retry).
        """
        if self.migrations.record(old_chat_id, new_chat_id):
            log.info("telegram chat %s migrated to %s; its sessions continue under the old key",
                     old_chat_id, new_chat_id)
        if self._record_aliases is None:  # running outside a gateway (no store)
            log.warning("telegram chat migration %s -> %s kept in memory only: no gateway store bound",
                        old_chat_id, new_chat_id)
            return
        await self.record_alias(str(new_chat_id), str(old_chat_id), source=source)

    async def _import_legacy_aliases(self) -> None:
        """Import `<data_dir>/chat_aliases.json` (written by gateways before the store kept
        aliases) once, then rename it to `chat_aliases.json.imported`. A file that cannot be read
        or imported is left in place and logged; start-up goes on."""
        if self.data_dir is None:
            return
        path = self.data_dir / LEGACY_FILE_NAME
        try:
            migrations = read_legacy_file(path)
        except (OSError, ValueError) as exc:
            log.error("telegram chat migrations not imported: %s", exc)
            return
        if not migrations and not path.exists():
            return
        try:
            for old, new in sorted(migrations.items()):
                await self._chat_migrated(old, new, source=LEGACY_FILE_NAME)
            path.rename(path.with_name(LEGACY_FILE_NAME + IMPORTED_SUFFIX))
        except Exception as exc:  # retried at the next start: the file stays where it was
            log.error("telegram chat migrations of %s not imported (%s: %s); retried at the next start",
                      path, type(exc).__name__, exc)
            return
        log.info("imported %d telegram chat migration(s) from %s into the store", len(migrations), path)

    @property
    def _token(self) -> str:
        token = self.settings.bot_token
        return token.get_secret_value() if token is not None else ""

    def _scrub(self, value: Any) -> str:
        text = str(value)
        return text.replace(self._token, "<telegram-token>") if self._token else text

    def _getme_failure(self, exc: Exception) -> str:
        """Why getMe failed, in words and without the token: the Bot API cannot be reached, it
        refused the call (Telegram's own description), or what answered is not the Bot API."""
        api = self._scrub(self.settings.base_url)
        if isinstance(exc, NetworkError):  # TimedOut too; PTB raises it from the HTTP library's error
            return f"telegram getMe failed: cannot reach the Bot API at {api}: {self._scrub(describe_failure(exc))}"
        if isinstance(exc, TelegramError):
            return f"telegram getMe failed: {self._scrub(exc)}"
        return (f"telegram getMe failed: what answered at {api} is not the Bot API "
                f"({self._scrub(describe_failure(exc))})")

    @property
    def bot(self):
        """The PTB bot (after `start`)."""
        if self._app is None:
            raise RuntimeError("telegram adapter is not started")
        return self._app.bot

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (getMe), then poll or serve the webhook. Idempotent.

        Raises:
            TelegramStartError: no token, the token was rejected, or the API is unreachable
                (message scrubbed of the token).
        """
        if self._started:
            return
        if not self._token:
            raise TelegramStartError("platforms.telegram.bot_token is not set "
                                     "(set HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN)")
        self._scrubber = _TokenScrubber(self._token)
        for name in TOKEN_LOGGERS:
            logging.getLogger(name).addFilter(self._scrubber)
        app = (ApplicationBuilder().token(self._token).base_url(self.settings.base_url)
               .base_file_url(self.settings.base_file_url).updater(None).build())
        try:
            await app.initialize()  # getMe
        except InvalidToken as exc:
            self._drop_scrubber()
            raise TelegramStartError(f"telegram rejected the bot token: {self._scrub(exc)}") from None
        except Exception as exc:
            self._drop_scrubber()
            raise TelegramStartError(self._getme_failure(exc)) from None
        await self._import_legacy_aliases()
        self._app = app
        self.bot_id = app.bot.id
        self.bot_username = app.bot.username
        await self._advertise_commands(app)
        try:
            if self.settings.mode == "webhook":
                await self._start_webhook()
            else:
                # getUpdates is refused while a webhook is set; keep the pending updates.
                await app.bot.delete_webhook(drop_pending_updates=False)
                self._stopping = False
                self._poll_task = asyncio.create_task(self._poll_loop(), name="telegram-poll")
        except Exception as exc:
            await app.shutdown()
            self._app = None
            self._drop_scrubber()
            raise TelegramStartError(f"telegram {self.settings.mode} start failed: "
                                     f"{self._scrub(describe_failure(exc))}") from None
        self._started = True
        log.info("telegram adapter started (%s) as @%s", self.settings.mode, self.bot_username)

    async def check_online(self) -> str:
        """`doctor --online`: getMe with the configured token and Bot API base URL.

        Raises:
            TelegramStartError: no token, the token was rejected, or the API is unreachable
                (message scrubbed of the token).
        """
        if not self._token:
            raise TelegramStartError("platforms.telegram.bot_token is not set "
                                     "(set HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN)")
        bot = Bot(self._token, base_url=self.settings.base_url, base_file_url=self.settings.base_file_url)
        try:
            await bot.initialize()  # getMe
        except InvalidToken:
            raise TelegramStartError("telegram rejected the bot token") from None
        except Exception as exc:
            raise TelegramStartError(self._getme_failure(exc)) from None
        try:
            return f"bot @{bot.username} (id {bot.id})"
        finally:
            await bot.shutdown()

    async def _advertise_commands(self, app: Application) -> None:
        """`setMyCommands`: the gateway's commands in the chat's "/" menu (`COMMAND_MENU`).
        Cosmetic: a refusal is logged and start-up goes on."""
        try:
            await app.bot.set_my_commands([BotCommand(name, text) for name, text in COMMAND_MENU])
        except TelegramError as exc:
            log.warning("telegram setMyCommands failed (%s); the command menu is not shown", self._scrub(exc))

    async def stop(self) -> None:
        """Stop receiving and disconnect. Idempotent. Pending updates stay at Telegram: the
        polling offset never moved past an update that was not accepted, and the webhook stays
        registered."""
        if not self._started:
            return
        self._started = False
        if self._poll_task is not None:
            # Never cancel in the middle of `emit`: the gateway may have recorded the message
            # as seen (dedupe) without queueing it yet, and the redelivery would then be dropped
            # as a duplicate. Let the update in hand finish, then cancel the long poll.
            self._stopping = True
            try:
                await asyncio.wait_for(self._idle.wait(), STOP_GRACE_S)
            except asyncio.TimeoutError:
                log.warning("telegram adapter: the gateway did not accept an update within %ss "
                            "of stopping; it will be redelivered", STOP_GRACE_S)
            self._poll_task.cancel()
            try:
                await self._poll_task
            except asyncio.CancelledError:
                pass
            self._poll_task = None
            await self._confirm_offset()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self.webhook_address = None
        if self._app is not None:
            await self._app.shutdown()
            self._app = None
        self._drop_scrubber()
        log.info("telegram adapter stopped")

    def _drop_scrubber(self) -> None:
        if self._scrubber is not None:
            for name in TOKEN_LOGGERS:
                logging.getLogger(name).removeFilter(self._scrubber)
            self._scrubber = None

    async def health(self) -> dict[str, Any]:
        """`{"ok", "mode", "bot_username", "offset", "last_error"}`; ok while started and the last
        getUpdates (polling) did not fail."""
        polling_dead = self._poll_task is not None and self._poll_task.done()
        return {"ok": self._started and self._last_error is None and not polling_dead,
                "mode": self.settings.mode,
                "bot_username": self.bot_username, "offset": self._offset,
                "last_error": self._last_error}

    # ---- receiving ---------------------------------------------------------------------------

    async def handle_update(self, update: Any) -> bool:
        """Map one raw update and emit it. Shared by polling and the webhook.

        Returns:
            True when the update is done with (emitted, or skipped on purpose: not for the agent,
            malformed, poison); False when the gateway failed to accept it and it must be
            offered again (the offset is not advanced / the webhook answers 500).
        """
        migration = migration_of(update)
        if migration is not None:
            try:
                await self._chat_migrated(*migration, source="migrate_chat_id")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Not stored: the supergroup's next message would start a new session. Offer the
                # update again (the same path as a refused emit).
                log.error("telegram chat migration %s -> %s not recorded: %s: %s", *migration,
                          type(exc).__name__, self._scrub(exc))
                return False
        kind = update_kind(update) if isinstance(update, dict) else None
        is_edit = kind in EDIT_KINDS
        try:
            # An edit is always mapped: it may change a message still queued (docs/behaviour.md §5);
            # `edits_as_turns` decides below, once the queue did not take it.
            mapped = map_update(update, bot_id=self.bot_id, topic_names=self.settings.topic_names,
                                edits_as_turns=True)
        except MalformedUpdate as exc:
            log.warning("skipping malformed telegram update: %s", exc)
            return True
        except Exception:
            # A payload shape the mapping did not anticipate: skip it, keep the adapter running.
            log.exception("skipping telegram update %r: it could not be mapped",
                          update.get("update_id") if isinstance(update, dict) else None)
            return True
        if mapped is None:
            return True
        source, event = mapped
        update_id = update["update_id"]
        if is_edit:
            # Offered to the gateway's queue first (`offer_change`); the edit is a turn of its own
            # only when the queue did not take it and `edits_as_turns` is on.
            change = QueuedChange(source, source.message_id or "", event.text, event)
            try:
                turn = await offer_change(
                    self.edit_queued, change, edits_as_turns=self.settings.edits_as_turns, logger=log,
                    label=f"telegram {kind} of message {source.message_id} in chat {source.chat_id} "
                          f"(update {update_id})")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # offered again, like a refused emit
                log.error("telegram edit of message %s not applied to the queue: %s: %s",
                          source.message_id, type(exc).__name__, self._scrub(exc))
                return False
            if turn is None:
                return True
        try:
            await self.emit(event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            attempts = self._emit_failures.get(update_id, 0) + 1
            self._emit_failures[update_id] = attempts
            if attempts >= self.settings.max_emit_attempts:
                log.error("telegram update %s refused by the gateway %d times, skipping it: %s: %s",
                          update_id, attempts, type(exc).__name__, self._scrub(exc))
                self._emit_failures.pop(update_id, None)
                return True
            log.warning("telegram update %s not accepted (attempt %d): %s: %s; it will be redelivered",
                        update_id, attempts, type(exc).__name__, self._scrub(exc))
            return False
        self._emit_failures.pop(update_id, None)
        return True

    async def _get_updates(self, params: dict[str, Any], **timeouts: Any) -> Any:
        """getUpdates as raw JSON through PTB's request layer (`Bot.do_api_request`), so a
        malformed update is skipped on its own instead of failing PTB's parsing of the batch."""
        with warnings.catch_warnings():
            # PTB warns that `get_updates` exists; the raw form is deliberate (see above). The
            # filter is narrow (this message only), so other tasks running meanwhile are unaffected.
            warnings.filterwarnings("ignore", message=r"Please use 'Bot\.getUpdates'",
                                    category=PTBUserWarning)
            return await self.bot.do_api_request("getUpdates", api_kwargs=params, **timeouts)

    async def _poll_loop(self) -> None:
        backoff = 0.0
        timeout = self.settings.poll_timeout
        while True:
            try:
                updates = await self._get_updates({"offset": self._offset, "timeout": timeout,
                                                   "allowed_updates": ALLOWED_UPDATES},
                                                  read_timeout=timeout + 10.0)
            except asyncio.CancelledError:
                raise
            except TgRetryAfter as exc:
                await asyncio.sleep(_retry_seconds(exc))
                continue
            except Exception as exc:  # network errors, Conflict, 5xx: keep the offset, back off
                backoff = min(max(backoff * 2, 0.5), self.settings.poll_backoff_max)
                self._last_error = f"{type(exc).__name__}: {self._scrub(exc)}"
                log.warning("telegram getUpdates failed (%s); retrying in %.1fs", self._last_error, backoff)
                await asyncio.sleep(backoff)
                continue
            backoff = 0.0
            self._last_error = None
            if not isinstance(updates, list):
                log.warning("telegram getUpdates returned %s, expected a list; ignoring it",
                            type(updates).__name__)
                continue
            for update in updates:
                update_id = update.get("update_id") if isinstance(update, dict) else None
                if isinstance(update_id, bool) or not isinstance(update_id, int):
                    log.warning("skipping malformed telegram update: field 'update.update_id' "
                                "is missing or not an integer")
                    continue
                self._idle.clear()
                try:
                    done = await self.handle_update(update)
                finally:
                    self._idle.set()
                if not done:
                    # Not accepted: do not move past it; fetch it again after a pause.
                    await asyncio.sleep(min(2 ** self._emit_failures.get(update_id, 1) / 4,
                                            self.settings.poll_backoff_max))
                    break
                # Update ids only grow at Telegram; max() keeps a stray lower id from moving
                # the offset back.
                self._offset = max(self._offset or 0, update_id + 1)
                if self._stopping:
                    return

    async def _confirm_offset(self) -> None:
        """Tell Telegram which updates were handled (a getUpdates with the next offset), so the
        next start does not receive them again. Best effort; dedupe covers a failure."""
        if self._offset is None or self._app is None:
            return
        try:
            await self._get_updates({"offset": self._offset, "timeout": 0, "limit": 1})
        except Exception as exc:  # shutting down: log and go on
            log.debug("telegram final offset confirmation failed: %s", self._scrub(exc))

    async def _start_webhook(self) -> None:
        webapp = web.Application()
        webapp.router.add_post(self.settings.webhook_path, self._on_webhook)
        runner = web.AppRunner(webapp, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.webhook_listen, self.settings.webhook_port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.webhook_address = (host, port)
        secret = self.settings.webhook_secret
        await self.bot.set_webhook(
            url=self.settings.webhook_url,
            secret_token=secret.get_secret_value() if secret else None,
            allowed_updates=ALLOWED_UPDATES,
            drop_pending_updates=False,
        )

    async def _on_webhook(self, request: web.Request) -> web.Response:
        secret = self.settings.webhook_secret
        if secret is not None and request.headers.get(SECRET_HEADER) != secret.get_secret_value():
            log.warning("telegram webhook call without the right secret token from %s refused",
                        request.remote)
            return web.Response(status=403, text="forbidden")
        try:
            update = await request.json()
        except ValueError as exc:
            # Not JSON: Telegram never sends this; answering 200 stops a pointless redelivery loop.
            log.warning("skipping malformed telegram webhook body: not JSON (%s)", exc)
            return web.Response(status=200, text="skipped")
        if not isinstance(update, dict) or isinstance(update.get("update_id"), bool) \
                or not isinstance(update.get("update_id"), int):
            log.warning("skipping malformed telegram update: field 'update.update_id' is missing "
                        "or not an integer")
            return web.Response(status=200, text="skipped")
        done = await self.handle_update(update)
        return web.Response(status=200 if done else 500, text="ok" if done else "retry")

    # ---- sending -----------------------------------------------------------------------------

    def _thread_param(self, chat_id: str, thread_id: str | None) -> int | None:
        if not thread_id or thread_id == GENERAL_TOPIC_ID:
            return None  # General is addressed by omitting the thread (TG-T8)
        if (chat_id, thread_id) in self._dead_threads:
            return None
        try:
            return int(thread_id)
        except ValueError:
            log.warning("telegram thread id %r is not numeric; sending without it", thread_id)
            return None

    async def send(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                   metadata: dict[str, Any] | None = None) -> SendResult:
        """Send one chunk (≤ 4096 UTF-16 units) to `target`'s chat and topic.

        Args:
            target: raw ids (`chat_id`, `thread_id`) of the stored origin.
            text: the chunk; rendered as MarkdownV2 unless `parse_mode = "plain"` or
                `metadata["parse_mode"] == "plain"`.
            reply_to: event message id of the trigger (`"42"` or `"42@<edit_date>"`); sent as a
                reply anchor that tolerates a deleted original.

        Returns:
            SendResult with Telegram's message id (str).

        Raises:
            hermes_core.sdk.errors.RetryAfter: Telegram answered 429 (seconds from retry_after).
            ValueError: the chunk is longer than 4096 UTF-16 units (chunk first: `send_text`).
            telegram.error.TelegramError: any other refusal (forbidden, chat not found, …).
        """
        if len(text.encode("utf-16-le")) // 2 > MAX_TEXT_UTF16:
            raise ValueError(f"telegram message is longer than {MAX_TEXT_UTF16} UTF-16 units; "
                             "chunk it first (send_text / hermes_core.sdk.chunking.chunk_text)")
        chat_id = self.migrations.current(target.chat_id)
        parse_mode = (metadata or {}).get("parse_mode", self.settings.parse_mode)
        kwargs: dict[str, Any] = {"chat_id": chat_id}
        thread = self._thread_param(chat_id, target.thread_id)
        if thread is not None:
            kwargs["message_thread_id"] = thread
        anchor = reply_anchor(reply_to)
        if anchor is not None:
            kwargs["reply_parameters"] = ReplyParameters(message_id=anchor,
                                                         allow_sending_without_reply=True)
        formatted = parse_mode == "MarkdownV2"
        migrated = False
        while True:
            try:
                if formatted:
                    message = await self.bot.send_message(text=to_markdown_v2(text),
                                                          parse_mode="MarkdownV2", **kwargs)
                else:
                    message = await self.bot.send_message(text=text, **kwargs)
                return SendResult(message_id=str(message.message_id))
            except TgRetryAfter as exc:
                raise RetryAfter(_retry_seconds(exc), scope="chat") from exc
            except ChatMigrated as exc:
                if migrated:
                    raise
                migrated = True
                new_id = str(exc.new_chat_id)
                try:
                    await self._chat_migrated(str(kwargs["chat_id"]), new_id, source="ChatMigrated")
                except Exception as err:  # the send still goes to the new chat
                    log.error("telegram chat migration %s -> %s not recorded: %s: %s",
                              kwargs["chat_id"], new_id, type(err).__name__, err)
                kwargs["chat_id"] = new_id
            except BadRequest as exc:
                reason = str(exc).lower()
                if "message thread not found" in reason and "message_thread_id" in kwargs:
                    log.info("telegram topic %s of chat %s not found; resending without the thread",
                             kwargs["message_thread_id"], kwargs["chat_id"])
                    self._dead_threads.add((str(kwargs["chat_id"]), str(kwargs.pop("message_thread_id"))))
                    continue
                if "can't parse entities" in reason and formatted:
                    log.info("telegram refused the formatted text (%s); resending as plain text", exc)
                    formatted = False
                    continue
                raise

    async def edit_message(self, target: SessionSource, message_id: str, text: str, *,
                           metadata: dict[str, Any] | None = None) -> SendResult:
        """Replace the text of a message the bot sent (capability "edit"), e.g. a streamed reply.

        Args:
            target: the chat the message is in (raw ids).
            message_id: Telegram's id of the bot's message (from a `SendResult`).
            text: the new text (≤ 4096 UTF-16 units); MarkdownV2 with a plain-text fallback as in
                `send`.

        Raises:
            hermes_core.sdk.errors.RetryAfter: 429.
            ValueError: `message_id` is not a Telegram id, or the text is too long.
            telegram.error.TelegramError: any other refusal ("message is not modified", …).
        """
        anchor = reply_anchor(message_id)
        if anchor is None:
            raise ValueError(f"not a telegram message id: {message_id!r}")
        if len(text.encode("utf-16-le")) // 2 > MAX_TEXT_UTF16:
            raise ValueError(f"telegram message is longer than {MAX_TEXT_UTF16} UTF-16 units")
        chat_id = self.migrations.current(target.chat_id)
        formatted = (metadata or {}).get("parse_mode", self.settings.parse_mode) == "MarkdownV2"
        while True:
            try:
                if formatted:
                    message = await self.bot.edit_message_text(
                        text=to_markdown_v2(text), chat_id=chat_id, message_id=anchor, parse_mode="MarkdownV2")
                else:
                    message = await self.bot.edit_message_text(text=text, chat_id=chat_id, message_id=anchor)
            except TgRetryAfter as exc:
                raise RetryAfter(_retry_seconds(exc), scope="chat") from exc
            except BadRequest as exc:
                if "can't parse entities" in str(exc).lower() and formatted:
                    formatted = False
                    continue
                raise
            return SendResult(message_id=str(getattr(message, "message_id", anchor)))

    async def send_media(self, target: SessionSource, media: dict[str, Any], *, caption: str | None = None,
                         reply_to: str | None = None, metadata: dict[str, Any] | None = None) -> SendResult:
        """Send one attachment (capability "media").

        Args:
            target: the chat and topic (same addressing as `send`).
            media: `{"kind": "photo" | "document" | "audio" | "video" | "voice" | "animation",
                and one of "path" (local file, uploaded), "url" (Telegram fetches it) or
                "file_id" (a file Telegram already has)}`.
            caption: plain-text caption, at most 1024 UTF-16 units (Bot API caption limit).
            reply_to: event message id of the trigger.

        Raises:
            ValueError: unknown kind, no file reference, or a caption over 1024 units.
            hermes_core.sdk.errors.RetryAfter: 429.
        """
        kind = media.get("kind", "document")
        senders = {"photo": "send_photo", "document": "send_document", "audio": "send_audio",
                   "video": "send_video", "voice": "send_voice", "animation": "send_animation"}
        if kind not in senders:
            raise ValueError(f"unsupported telegram media kind {kind!r}; expected one of {sorted(senders)}")
        if "path" in media:
            from pathlib import Path  # only uploads need it
            payload: Any = Path(media["path"])
        elif media.get("url") or media.get("file_id"):
            payload = media.get("url") or media.get("file_id")
        else:
            raise ValueError("media needs one of 'path', 'url' or 'file_id'")
        if caption is not None and len(caption.encode("utf-16-le")) // 2 > 1024:
            raise ValueError("telegram captions are limited to 1024 UTF-16 units")
        chat_id = self.migrations.current(target.chat_id)
        kwargs: dict[str, Any] = {"chat_id": chat_id, kind: payload}
        if caption:
            kwargs["caption"] = caption
        thread = self._thread_param(chat_id, target.thread_id)
        if thread is not None:
            kwargs["message_thread_id"] = thread
        anchor = reply_anchor(reply_to)
        if anchor is not None:
            kwargs["reply_parameters"] = ReplyParameters(message_id=anchor, allow_sending_without_reply=True)
        while True:
            try:
                message = await getattr(self.bot, senders[kind])(**kwargs)
                return SendResult(message_id=str(message.message_id))
            except TgRetryAfter as exc:
                raise RetryAfter(_retry_seconds(exc), scope="chat") from exc
            except BadRequest as exc:
                if "message thread not found" in str(exc).lower() and "message_thread_id" in kwargs:
                    self._dead_threads.add((str(chat_id), str(kwargs.pop("message_thread_id"))))
                    continue
                raise

    async def send_text(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                        metadata: dict[str, Any] | None = None,
                        policy: RetryPolicy | None = None) -> list[SendResult]:
        """Send a whole reply: chunked at 4096 UTF-16 units (code fences closed and reopened),
        in order under the chat's lock, 429 waited out (SDK `send_chunks`). The first chunk
        replies to `reply_to`.

        Raises:
            hermes_core.sdk.errors.SendError: a chunk failed (`err.sent` lists the ones sent).
        """
        chunks = chunk_text(text, self.spec.max_message_length, self.spec.length_unit)
        return await send_chunks(self, target, chunks, reply_to=reply_to, metadata=metadata,
                                 queue=self._send_queue, policy=policy or self.retry_policy)

    @property
    def retry_policy(self) -> RetryPolicy:
        """429 handling from the settings (docs/configuration.md §4): a `retry_after` up to
        `max_retry_after` seconds is waited out, at most `send_attempts` tries per chunk."""
        return RetryPolicy(max_wait_s=self.settings.max_retry_after, max_attempts=self.settings.send_attempts)

    async def send_typing(self, target: SessionSource) -> None:
        """Show "typing…" for about 5 s. General takes `message_thread_id=1` here (TG-T8)."""
        kwargs: dict[str, Any] = {"chat_id": self.migrations.current(target.chat_id), "action": "typing"}
        if target.thread_id:
            try:
                kwargs["message_thread_id"] = int(target.thread_id)
            except ValueError:
                pass
        await self.bot.send_chat_action(**kwargs)
