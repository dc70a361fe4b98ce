"""Hook specifications of hermes_core (CONVENTIONS.md §2), in lifecycle order.

Every docstring is a contract: return semantics, sync/async, firstresult or broadcast, whether
deployments are expected to wrap it, and its timeout class.

* **firstresult** hooks are SYNC ONLY (async impls are rejected at load) and stop at the first
  non-None result. Core defaults are `trylast`; plugins use plain hookimpls; deployments use
  `@hermes_core.override` (`tryfirst`), so deployment > plugins > builtins.
* **broadcast** hooks run every implementation through `plugin_system.dispatch.call_broadcast`:
  each isolated (an exception is logged, the others still run) and time-limited by
  `[plugins] hook_timeout_s`; async implementations are awaited.
"""

from __future__ import annotations

from pluggy import HookspecMarker

PROJECT_NAME = "hermes_core"
hookspec = HookspecMarker(PROJECT_NAME)


# ---- Init ----------------------------------------------------------------------------------

@hookspec(historic=True)
def hermes_configure(config):
    """Receive the validated `GatewayConfig` once, at start-up.

    Historic and sync: plugins registered later (deployment overrides, test plugins) still
    receive it. Return value ignored. No timeout (must not block).
    """


@hookspec
def hermes_settings_schema():
    """Return an iterable of `SettingsSpec(section, model, table)` records, or None.

    Collect-all, sync. The core validates each `[platforms.<section>]` / `[plugins.<section>]`
    table into `model` (extra keys forbidden, tokens as SecretStr) and rejects duplicate sections.
    """


# ---- Key building (seed §4, §5) ------------------------------------------------------------

@hookspec(firstresult=True)
def hermes_canonical_identity(platform, kind, value):
    """Fold aliases of one id into its canonical form before keying and pseudonymising.

    Args: platform (str), kind (`"chat"` or `"user"`), value (raw id str).
    Returns the canonical str, or None to defer. FIRSTRESULT, SYNC ONLY. Core default (trylast)
    normalises WhatsApp ids (SPEC.md §4). Never used for delivery (delivery keeps raw ids).
    """


@hookspec(firstresult=True)
def hermes_session_key(source, policy):
    """Return the session key for `source` (a SessionSource) under `policy` (a KeyPolicy).

    Returns str, or None to defer. FIRSTRESULT, SYNC ONLY. The core default (trylast) is
    `hermes_core.keys.build_session_key`. A platform plugin returns a key only for its own
    platform. Deployments override with `@hermes_core.override` and should override
    `hermes_session_shared` with the same rule.
    """


@hookspec(firstresult=True)
def hermes_session_shared(source, policy):
    """Return True when `source` is in a shared multi-user session (seed §5), or None to defer.

    FIRSTRESULT, SYNC ONLY. Core default (trylast) is `keys.is_shared_multi_user_session`,
    driven by the same rule as the key; a contract test checks the two agree.
    """


# ---- Context and PII-safe redaction (seed §9) ----------------------------------------------

@hookspec
def hermes_platform_notes(context):
    """Return an iterable of extra lines for the session-context prompt, or None.

    Collect-all, sync. `context` is a SessionContext. Lines must not contain raw ids of users
    when the platform is `pii_safe` and redaction is on.
    """


@hookspec
def hermes_redaction_rules(platform):
    """Return an iterable of `RedactionRule` records for `platform`, or None.

    Collect-all, sync. The core applies the union of all rules, so the result does not depend on
    order and no plugin can un-redact another's rule.
    """


@hookspec(firstresult=True)
def hermes_pseudonymize(platform, kind, value):
    """Return the pseudonym for a raw id (`kind` is `"user"` or `"chat"`), or None to defer.

    FIRSTRESULT, SYNC ONLY. Core default (trylast): `user_<sha256[:12]>` for users;
    `<prefix>:<12hex>` or `<12hex>` for chats, hashing the canonical id (SPEC.md §7). Applied only
    where the adapter's spec says `pii_safe=True`. Routing always uses raw ids.
    """


# ---- Delivery ------------------------------------------------------------------------------

@hookspec(firstresult=True)
def hermes_plan_delivery(delivery):
    """Return a `DeliveryPlan` for `delivery` (an OutboundDelivery), or None to defer.

    FIRSTRESULT, SYNC ONLY, DESIGNED TO BE WRAPPED: the core supplies the innermost impl
    (trylast, chunking to the adapter's limit); plugins and deployments use `wrapper=True` to
    split, re-format, redact or veto. The core then performs the async send.
    """


@hookspec
def hermes_after_deliver(delivery, outcome):
    """Observe a finished delivery (`outcome`: a DeliveryOutcome). Broadcast, async allowed,
    isolated per plugin, hook timeout. Return value ignored."""


@hookspec
def hermes_on_delivery_error(delivery, error):
    """Observe a failed delivery attempt (`error`: the exception). Broadcast, async allowed,
    isolated per plugin, hook timeout. Return value ignored."""


# ---- Recovery (seed §7) ---------------------------------------------------------------------

@hookspec(firstresult=True)
def hermes_recovery_plan(session, failure):
    """Return a `RecoveryPlan` for `session` (a SessionEntry) after `failure` (a str reason:
    `"restart_interrupted"`, `"shutdown_timeout"`, `"agent_error"`, …), or None to defer.

    FIRSTRESULT, SYNC ONLY. Core default (trylast): resume once for interruptions, give up
    after errors.
    """


@hookspec
def hermes_on_session_recovered(session, plan):
    """Observe a recovered session. Broadcast, async allowed, isolated, hook timeout."""


# ---- Housekeeping (seed §10, §11) ----------------------------------------------------------

@hookspec
def hermes_housekeeping(ctx):
    """Run one housekeeping pass. `ctx` gives the store, clock and config.

    Broadcast, async allowed, isolated per plugin, hook timeout; called by every watcher tick.
    Core housekeeping (agent-cache TTL and pressure, route pruning, FTS check) is itself a builtin.
    """


# ---- Session lifecycle ---------------------------------------------------------------------

@hookspec
def hermes_session_reset(entry, reason):
    """Observe an explicit boundary: `entry` is the new SessionEntry, `reason` one of
    `"new"`, `"reset"`, `"suspended"`. Broadcast, async allowed, isolated, hook timeout.
    Nothing ends a session for idleness (seed §6)."""


@hookspec
def hermes_session_finalized(entry):
    """Observe the end of a session id (`entry` as it was before the boundary). Broadcast,
    async allowed, isolated, hook timeout."""


# ---- Start-up and shutdown -----------------------------------------------------------------

@hookspec
def hermes_startup(app):
    """Called once after the gateway app has started (store open, adapters started).
    Broadcast, async allowed, isolated, `[plugins] setup_timeout_s`."""


@hookspec
def hermes_shutdown(app):
    """Called once during shutdown, after the drain and before the store closes.
    Broadcast, async allowed, isolated, hook timeout."""


# ---- Hook classes (enforced at load by plugin_system.loader.check_plugin_policies) ----------

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
