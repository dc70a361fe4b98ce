"""What a chat is told when its message could not be answered (docs/behaviour.md §0: users never
see internal errors, URLs or exception names; operators get the detail in the log).

`failure_notice` asks the `hermes_failure_notice` hook (a deployment or plugin words the notice)
and falls back to the configured text: `[core] agent_failure_notice` for a failed model backend,
`[core] error_notice` for a failure of the gateway itself, `TIMEOUT_TEXT` for a turn that ran past
`[agent] gateway_timeout`. The caller logs the error itself; this module never puts it in text.
"""

from __future__ import annotations

import logging
from typing import Any

from .ledger import OutcomeRecorder, send_obligation

log = logging.getLogger(__name__)

AGENT_FAILED, AGENT_TIMEOUT, INTERNAL_ERROR = "agent_failed", "agent_timeout", "internal_error"
TIMEOUT_TEXT = "The agent did not answer within {seconds} seconds; the turn was stopped."
# One-shot notices an entry can owe its chat (`SessionEntry.pending_notice`, docs/behaviour.md §6).
PENDING_NOTICES = {
    "stuck_loop": "The previous conversation was stopped after it failed 3 restarts in a row; "
                  "this is a new session.",
}


async def tell_pending_notice(deps: Any, key: str, entry: Any, source: Any, *,
                              recorder: OutcomeRecorder | None = None) -> None:
    """Tell the chat, once, the notice its entry owes (`entry.pending_notice`), through the
    delivery ledger like any reply (`recorder`: the turn's outcome recorder, as for its reply,
    `send_obligation`). No-op without one; a failure is logged, never raised (the user's message
    is still answered)."""
    if not entry.pending_notice:
        return
    try:
        kind = await deps.store.take_pending_notice(key)
        text = PENDING_NOTICES.get(kind or "")
        if text is None:
            return
        ob_id = await deps.store.record_reply(key, entry.session_id, None, origin=source, content=text)
        if ob_id is not None:
            await send_obligation(deps, ob_id, source, text, session_key=key, session_id=entry.session_id,
                                  reply_to=None, kind="notice", recorder=recorder)
    except Exception as exc:
        log.error("the %s notice of %s could not be sent: %s", entry.pending_notice, key, exc)


def default_notice(config: Any, kind: str) -> str:
    """The configured text for `kind` (`agent_failed`, `agent_timeout`, `internal_error`)."""
    if kind == AGENT_FAILED:
        return config.core.agent_failure_notice
    if kind == AGENT_TIMEOUT:
        return TIMEOUT_TEXT.format(seconds=config.agent.gateway_timeout)
    return config.core.error_notice


def failure_notice(pm: Any, config: Any, kind: str, source: Any, error: BaseException | None) -> str:
    """The notice to send for a message that could not be answered.

    Args:
        pm: the plugin manager (hook `hermes_failure_notice`).
        config: GatewayConfig (the configured texts).
        kind: `agent_failed`, `agent_timeout` or `internal_error`.
        source: the SessionSource of the chat.
        error: the exception (passed to the hook, never shown).
    Returns:
        The hook's text, else the configured one. Never raises.
    """
    fallback = default_notice(config, kind)
    try:
        text = pm.hook.hermes_failure_notice(kind=kind, source=source, error=error)
    except Exception as exc:  # a broken plugin must not stop the chat from being told
        log.error("hermes_failure_notice failed (%s); the configured notice is sent", type(exc).__name__)
        return fallback
    if text is None:
        return fallback
    if not isinstance(text, str) or not text.strip():
        log.error("hermes_failure_notice returned %s, not a non-empty str; the configured notice is sent",
                  type(text).__name__)
        return fallback
    return text
