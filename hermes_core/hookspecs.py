"""Hook specifications of hermes_core (docs/architecture.md §2), in lifecycle order.

Every docstring is a contract with four fixed lines:

* **Kind** — `FIRSTRESULT, SYNC ONLY` (stops at the first non-None result; async implementations
  are rejected at load), `collect-all, SYNC ONLY` (every non-None result is returned in a list),
  `historic, SYNC ONLY`, or `Broadcast, async allowed` (run by `plugin_system.dispatch.call_broadcast`:
  every implementation runs, each isolated; coroutines are awaited under the time limit).
* **Returns** — what a value means, and what None means.
* **Wrap** — whether `wrapper=True` implementations are expected. Wrappers are allowed on sync
  hooks only (rejected on broadcast hooks at load).
* **Timeout** — `none` (sync hooks must not block), `[plugins] hook_timeout_s` or
  `[plugins] setup_timeout_s` (per implementation, for awaitables only). A *synchronous*
  implementation of a broadcast hook runs inline on the event loop and is not interrupted, so it
  must return promptly; an overrun is logged as a warning naming the plugin. Put slow work in an
  `async def` implementation (which may `await asyncio.to_thread(...)`): that is time-limited.
  (Why not a thread for sync implementations: see `plugin_system/dispatch.py`.)

Precedence for firstresult hooks: core defaults are `trylast`; plugins use plain `@hookimpl`;
deployments use `@hermes_core.override` (`tryfirst`, registered last), so
deployment > plugins > builtins. Plugins must not use `tryfirst` on firstresult hooks (warned at
load; an error under `[plugins] strict`). pluggy consults the last registered implementation first
within a band; entry-point plugins are registered sorted by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Awaitable, Iterable

from pluggy import HookspecMarker

if TYPE_CHECKING:  # annotations only: the hookspecs import nothing at run time (no cycles)
    from .app import GatewayApp
    from .model.access import AccessRequest
    from .model.context import SessionContext
    from .model.entry import SessionEntry
    from .model.source import SessionSource
    from .scheduler import HousekeepingContext
    from .settings import GatewayConfig
    from .types import (DeliveryOutcome, DeliveryPlan, KeyPolicy, OutboundDelivery, RecoveryPlan, RedactionRule,
                        SettingsSpec)

PROJECT_NAME = "hermes_core"
hookspec = HookspecMarker(PROJECT_NAME)


# ---- Init ----------------------------------------------------------------------------------

@hookspec(historic=True)
def hermes_configure(config: GatewayConfig) -> None:
    """Receive the validated `GatewayConfig` once, at start-up.

    Kind: historic, SYNC ONLY — plugins registered later (deployment overrides, test plugins)
    still receive it, right when they register.
    Returns: ignored.
    Wrap: no.
    Timeout: none (must not block or do I/O).
    """


@hookspec
def hermes_settings_schema() -> Iterable[SettingsSpec] | None:
    """Declare the settings tables this plugin owns.

    Kind: collect-all, SYNC ONLY.
    Returns: an iterable of `SettingsSpec(section, model, table)` records, or None for none. The
    core validates each `[platforms.<section>]` table into `model` (extra keys forbidden, tokens as
    SecretStr; `enabled` and `adapter` are the core's keys) with
    `plugin_system.settings.validate_plugin_settings`, and rejects a section declared twice.
    Wrap: no.
    Timeout: none.
    """


# ---- Key building (seed §4, §5) ------------------------------------------------------------

@hookspec(firstresult=True)
def hermes_canonical_identity(platform: str, kind: str, value: str) -> str | None:
    """Fold aliases of one id into its canonical form before keying and pseudonymising.

    Args: platform (str), kind (`"chat"` or `"user"`), value (raw id str).
    Kind: FIRSTRESULT, SYNC ONLY.
    Returns: the canonical str, or None to defer. Core default (trylast) normalises WhatsApp ids
    (docs/behaviour.md §4). Never used for delivery (delivery keeps raw ids).
    Wrap: allowed (e.g. a deployment alias store post-processing the result).
    Timeout: none.
    """


@hookspec(firstresult=True)
def hermes_session_key(source: SessionSource, policy: KeyPolicy) -> str | None:
    """Return the session key for `source` (a SessionSource) under `policy` (a KeyPolicy).

    Kind: FIRSTRESULT, SYNC ONLY.
    Returns: the key str, or None to defer. The core default (trylast) is
    `hermes_core.keys.build_session_key`. A platform plugin returns a key only for its own
    platform. Keys are opaque: nothing may parse them to route.
    Wrap: allowed; deployments usually replace with `@hermes_core.override` and must then override
    `hermes_session_shared` with the same rule (the SessionKeyContract checks they agree).
    Timeout: none.
    """


@hookspec(firstresult=True)
def hermes_session_shared(source: SessionSource, policy: KeyPolicy) -> bool | None:
    """Say whether `source` is in a shared multi-user session (seed §5).

    Kind: FIRSTRESULT, SYNC ONLY.
    Returns: True / False, or None to defer. Core default (trylast) is
    `keys.is_shared_multi_user_session`, driven by the same rule as the key.
    Wrap: allowed; override together with `hermes_session_key`.
    Timeout: none.
    """


# ---- Access control (docs/behaviour.md §9) --------------------------------------------------

@hookspec(firstresult=True)
def hermes_authorize(request: AccessRequest) -> bool | None:
    """Decide whether the sender of one inbound message may talk to the agent.

    Args: request (an `AccessRequest`: the SessionSource, the platform table's common settings,
    and the sender's and chat's ids in every known form — raw, canonical, aliases).
    Kind: FIRSTRESULT, SYNC ONLY. Called for every inbound message before anything about it is
    stored; a refused message creates no session, transcript or intake row.
    Returns: True (answer), False (refuse), or None to defer. Core default (trylast,
    `builtin/access.py`): the local terminal is allowed; bots need `allow_bots`; then
    `allow_all`, `allowed_users`, `allowed_chats` or `allowed_roles` allow; everything else is
    refused.
    Wrap: allowed (e.g. to log or audit every decision).
    Timeout: none (must not block or do I/O: it runs once per message on the event loop).
    """


# ---- Context and PII-safe redaction (seed §9) ----------------------------------------------

@hookspec
def hermes_platform_notes(context: SessionContext) -> Iterable[str] | None:
    """Add per-platform lines to the session-context prompt (seed §9).

    Kind: collect-all, SYNC ONLY. `context` is a SessionContext.
    Returns: an iterable of str lines, or None for none. When the prompt is redacted (`pii_safe`
    adapter and `[redaction] enabled`) the core passes each line through the `llm_context`
    redaction rules, but rules only catch what they match (contact details, id shapes): do not
    put raw user or chat ids in notes. The turn keeps the section it built with the session's
    live transcript and builds it again only when the source or the sharing changes
    (docs/behaviour.md §7): return the same lines for the same source (its `message_id` aside, and
    in a shared session its sender).
    Wrap: no.
    Timeout: none.
    """


@hookspec
def hermes_redaction_rules(platform: str) -> Iterable[RedactionRule] | None:
    """Contribute text-redaction rules for `platform` (seed §9).

    Args: platform (str) — a platform id, or `"*"` (`plugin_system.redaction.ANY_PLATFORM`) for
    text tied to no one platform (log lines): return the rules that apply everywhere then.
    Kind: collect-all, SYNC ONLY.
    Returns: an iterable of `RedactionRule` records (each with its scopes among log /
    llm_context / store / index), or None. The union of every plugin's rules is applied in
    rule-name order, so the result does not depend on registration order and no plugin can
    un-redact another's rule. Where the core applies each scope:
      - `llm_context`: the free text of the session-context prompt (names, chat names, topics,
        `hermes_platform_notes` lines) when ids are pseudonymised there (`pii_safe` adapter and
        `[redaction] enabled`); pseudonyms and routing ids are never rewritten.
      - `log`: every log record that reaches a handler carrying
        `plugin_system.redaction.RedactionLogFilter` (the gateway installs it on its handlers at
        start with `install_log_redaction`; rules are read once then), and the exception text
        of a failing broadcast implementation. A rule that raises withholds the log message.
      - `store` / `index`: NOT applied by the core; transcripts keep what the user wrote
        (erasing is an explicit purge). Code that exports or indexes text applies them with
        `plugin_system.redaction.redact_text(pm, platform, text, "store" | "index")`.
    Rules are called with every text of their scope, so they must be fast and must not log.
    Wrap: no.
    Timeout: none.
    """


@hookspec(firstresult=True)
def hermes_pseudonymize(platform: str, kind: str, value: str) -> str | None:
    """Return the pseudonym of a canonical id (`kind` is `"user"` or `"chat"`).

    Kind: FIRSTRESULT, SYNC ONLY.
    Returns: the pseudonym str, or None to defer. Core default (trylast): `user_<sha256[:12]>`
    for users; `<prefix>:<12hex>` or `<12hex>` for chats (docs/behaviour.md §7), of the id canonicalised by
    `hermes_canonical_identity`. Applied to the user and chat ids of the session-context prompt
    only where the adapter's spec says `pii_safe=True` and `[redaction] enabled` (so never for
    Discord). Routing, keys and adapters always use raw ids.
    Wrap: allowed.
    Timeout: none.
    """


# ---- Delivery ------------------------------------------------------------------------------

@hookspec(firstresult=True)
def hermes_plan_delivery(delivery: OutboundDelivery) -> DeliveryPlan | None:
    """Plan how `delivery` (an OutboundDelivery) is sent.

    Kind: FIRSTRESULT, SYNC ONLY.
    Returns: a `DeliveryPlan` (chunks in order, reply anchor, veto), or None to defer. The core
    supplies the innermost impl (trylast): `sdk.chunking.chunk_text` to the adapter's
    `max_message_length` in its `length_unit`, first chunk replying to the trigger.
    Wrap: DESIGNED TO BE WRAPPED — plugins and deployments use `wrapper=True` to split,
    re-format, redact or veto the plan. The core then performs the async send
    (`sdk.sending.deliver_plan`: per-chat order, retry-after).
    Timeout: none (plan synchronously; execution is the core's).
    """


@hookspec
def hermes_after_deliver(delivery: OutboundDelivery, outcome: DeliveryOutcome) -> Awaitable[None] | None:
    """Observe a finished delivery (`outcome`: a DeliveryOutcome).

    Kind: Broadcast, async allowed; isolated per plugin.
    Returns: ignored.
    Wrap: no (rejected at load).
    Timeout: `[plugins] hook_timeout_s` per implementation.
    """


@hookspec
def hermes_on_delivery_error(delivery: OutboundDelivery, error: BaseException) -> Awaitable[None] | None:
    """Observe a failed delivery attempt (`error`: the exception, e.g. `RetryAfterExceeded`).

    Kind: Broadcast, async allowed; isolated per plugin.
    Returns: ignored.
    Wrap: no (rejected at load).
    Timeout: `[plugins] hook_timeout_s` per implementation.
    """


@hookspec(firstresult=True)
def hermes_failure_notice(kind: str, source: SessionSource, error: BaseException) -> str | None:
    """Word the short notice a chat gets when its message could not be answered.

    Args: kind (str) — `"agent_failed"` (the model backend failed: HTTP error, bad response),
    `"agent_timeout"` (no answer within `[agent] gateway_timeout`) or `"internal_error"` (the
    gateway itself failed on this message); source — the SessionSource of the chat; error — the
    exception (for deciding only: its text may hold internal URLs, hosts and class names and must
    never be shown to the user; the core logs it for the operator).
    Kind: FIRSTRESULT, SYNC ONLY.
    Returns: the text to send, or None to defer. When every implementation defers, the core sends
    its configured text (`pipeline.notices`): `[core] agent_failure_notice`, `[core] error_notice`,
    or the timeout sentence naming the limit. A raising implementation or a non-str / empty result
    is logged and the configured text is sent.
    Wrap: allowed.
    Timeout: none.
    """


@hookspec(firstresult=True)
def hermes_chat_instructions(source: SessionSource) -> str | None:
    """The platform's standing instructions for one chat, topic or channel (seed §2
    `is_fresh_reset`: "re-inject the topic/channel skill"), given to the first turn after `/new`
    or `/reset`.

    Args: source — the SessionSource of the message (platform, chat, thread, chat_topic).
    Kind: FIRSTRESULT, SYNC ONLY.
    Returns: the instructions (str), or None to defer. The core appends a non-empty result to the
    turn's system context under `## Chat Instructions`, once: the session's `is_fresh_reset` flag
    is cleared after that turn completes. A raising implementation is logged and the turn runs
    without instructions.
    Wrap: allowed.
    Timeout: none.
    """


# ---- Recovery (seed §7) ---------------------------------------------------------------------

@hookspec(firstresult=True)
def hermes_recovery_plan(session: SessionEntry, failure: str) -> RecoveryPlan | None:
    """Decide what happens to `session` (a SessionEntry) after `failure` (seed §7).

    Called at start-up, before any adapter starts, for each session marked `resume_pending`
    whose interruption is recent enough to auto-continue (`failure` = its resume reason:
    `"restart_interrupted"`, `"restart_timeout"`, `"shutdown_timeout"`), and with
    `failure="stuck_loop"` for a session interrupted in 3 or more consecutive runs. Other reasons
    (`"agent_error"`, …) may be passed by future callers; the default gives up on them.
    Kind: FIRSTRESULT, SYNC ONLY.
    Returns: a `RecoveryPlan` (resume / retry / backoff / reset / give_up), or None to defer.
    Core default (trylast, `builtin/recovery.py`): resume once for the seed's auto-resume
    reasons, give up otherwise. A raising implementation or a non-RecoveryPlan result is logged
    and the core default is used, so a broken plugin cannot stop recovery.
    Wrap: allowed.
    Timeout: none.
    """


@hookspec
def hermes_on_session_recovered(session: SessionEntry, plan: RecoveryPlan) -> Awaitable[None] | None:
    """Observe a recovered session and the RecoveryPlan applied to it.

    Called at start-up recovery, once per session marked `resume_pending` (or suspended as a
    stuck loop) whose `hermes_recovery_plan` was applied, before any adapter starts.
    Kind: Broadcast, async allowed; isolated per plugin.
    Returns: ignored.
    Wrap: no (rejected at load).
    Timeout: `[plugins] hook_timeout_s` per implementation.
    """


# ---- Housekeeping (seed §10, §11) ----------------------------------------------------------

@hookspec
def hermes_housekeeping(ctx: HousekeepingContext) -> Awaitable[None] | None:
    """Run one housekeeping pass. `ctx` gives the store, clock and config.

    Kind: Broadcast, async allowed; isolated per plugin; called by every watcher tick. Core
    housekeeping (agent-cache TTL and pressure, route pruning, FTS check) is itself a builtin.
    Returns: ignored.
    Wrap: no (rejected at load).
    Timeout: `[plugins] hook_timeout_s` per implementation, inside the tick's own timeout.
    """


# ---- Session lifecycle ---------------------------------------------------------------------

@hookspec
def hermes_session_reset(entry: SessionEntry, reason: str) -> Awaitable[None] | None:
    """Observe an explicit boundary: `entry` is the new SessionEntry, `reason` one of `"new"`,
    `"reset"`, `"suspended"`. Nothing ends a session for idleness (seed §6).

    Kind: Broadcast, async allowed; isolated per plugin.
    Returns: ignored.
    Wrap: no (rejected at load).
    Timeout: `[plugins] hook_timeout_s` per implementation.
    """


@hookspec
def hermes_session_finalized(entry: SessionEntry) -> Awaitable[None] | None:
    """Observe the end of a session id (`entry` as it was before the boundary).

    Kind: Broadcast, async allowed; isolated per plugin.
    Returns: ignored.
    Wrap: no (rejected at load).
    Timeout: `[plugins] hook_timeout_s` per implementation.
    """


# ---- Start-up and shutdown -----------------------------------------------------------------

@hookspec
def hermes_startup(app: GatewayApp) -> Awaitable[None] | None:
    """Called once after the gateway app has started (store open, adapters started).

    Kind: Broadcast, async allowed; isolated per plugin.
    Returns: ignored.
    Wrap: no (rejected at load).
    Timeout: `[plugins] setup_timeout_s` per implementation.
    """


@hookspec
def hermes_shutdown(app: GatewayApp) -> Awaitable[None] | None:
    """Called once during shutdown, after the drain and before the store closes.

    Kind: Broadcast, async allowed; isolated per plugin.
    Returns: ignored.
    Wrap: no (rejected at load).
    Timeout: `[plugins] hook_timeout_s` per implementation.
    """


# ---- Hook classes (enforced at load by plugin_system.policy.check_plugin_policies) ----------

# Broadcast hooks: every implementation runs through `dispatch.call_broadcast`; async
# implementations are awaited under the hook timeout. Every other hook is SYNC ONLY.
ASYNC_ALLOWED_HOOKS = frozenset({
    "hermes_after_deliver",
    "hermes_on_delivery_error",
    "hermes_on_session_recovered",
    "hermes_housekeeping",
    "hermes_session_reset",
    "hermes_session_finalized",
    "hermes_startup",
    "hermes_shutdown",
})

# Timeout class of each broadcast hook: `[plugins] setup_timeout_s` for start-up, else
# `[plugins] hook_timeout_s`.
SETUP_TIMEOUT_HOOKS = frozenset({"hermes_startup"})
