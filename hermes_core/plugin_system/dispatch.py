"""Async dispatch of broadcast hooks (docs/architecture.md §4).

pluggy calls implementations synchronously and stops at the first exception, which would skip
the remaining plugins and leave coroutines un-awaited. Broadcast hooks (observers such as
`hermes_after_deliver`, `hermes_housekeeping`, `hermes_startup`) therefore go through
`call_broadcast`, which runs every implementation in pluggy's own order, each isolated and
time-limited. firstresult and wrapper hooks are sync by rule and use `pm.hook.<name>(...)`.

Tracing: only hook names, plugin names and argument *types* are logged, never values (a
messaging gateway's kwargs carry message bodies and phone numbers). A failing plugin's exception
text can carry them too, so it is logged only after the `log`-scope redaction rules
(`redaction.redact_for_log`, for the platform named by the hook arguments when there is one).

Time limits apply to *awaitables* only. A synchronous implementation runs inline on the event
loop and must return promptly (hookspecs.py says so for every broadcast hook); one that overruns
the limit is logged as a warning naming the plugin, but it is not moved to a thread. Why: running
plugin code on a worker thread would silently change its threading contract (a sync observer may
create tasks or touch loop-bound objects such as the store, which is only safe on the loop
thread), and a thread that overruns cannot be stopped anyway, so the "limit" would only hide
a leaked, still-running call. Slow or blocking work belongs in an `async def` implementation
(which may itself `await asyncio.to_thread(...)`), and that is time-limited.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Any

from .redaction import ANY_PLATFORM, redact_for_log

log = logging.getLogger(__name__)


class HookTimeout(TimeoutError):
    """One broadcast implementation exceeded its time limit.

    Attributes:
        plugin_name: the registered name of the slow plugin.
        hook: the hook name.
        timeout: the limit in seconds.
    """

    def __init__(self, plugin_name: str, hook: str, timeout: float):
        super().__init__(f"{plugin_name}.{hook} did not finish within {timeout:g}s")
        self.plugin_name = plugin_name
        self.hook = hook
        self.timeout = timeout


def _types_only(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {type(v).__name__}" for k, v in kwargs.items())


def _platform_of(kwargs: dict[str, Any]) -> str | None:
    """The platform id the hook arguments are about (a delivery's target, a session's origin),
    so that platform's log rules apply to the error text too; None when there is none."""
    for value in kwargs.values():
        for holder in (value, getattr(value, "target", None), getattr(value, "origin", None),
                       getattr(value, "source", None)):
            platform = getattr(holder, "platform", None)
            if isinstance(platform, str) and platform:
                return platform
    return None


async def call_broadcast(pm, name: str, *, timeout: float | None, **kwargs: Any) -> list[tuple[str, Any]]:
    """Call every implementation of broadcast hook `name`, isolated and time-limited.

    Args:
        pm: the application's pluggy PluginManager.
        name: hook name, e.g. `"hermes_after_deliver"`.
        timeout: seconds each awaitable result may take (`[plugins] hook_timeout_s`, or
            `setup_timeout_s` for `hermes_startup`); None = no limit. A synchronous
            implementation is not interrupted; one that ran longer is logged as a warning
            (module docstring says why).
        **kwargs: the hook arguments; each implementation receives only the names it declares
            (`impl.argnames`), so implementations taking a subset keep working.

    Returns:
        `[(plugin_name, result_or_exception), …]` in pluggy's call order
        (`reversed(get_hookimpls())`: tryfirst and last-registered first). A failed
        implementation contributes its exception (a `HookTimeout` on timeout); the others still run.
        Wrapper implementations are skipped (wrappers are for sync firstresult hooks only).

    Raises:
        AttributeError: `name` is not a known hook.
    """
    caller = getattr(pm.hook, name)
    results: list[tuple[str, Any]] = []
    for impl in reversed(caller.get_hookimpls()):
        plugin_name = impl.plugin_name
        if impl.hookwrapper or impl.wrapper:
            log.debug("skipping wrapper %s.%s in broadcast", plugin_name, name)
            continue
        if pm.is_blocked(plugin_name):
            continue
        call_kwargs = {arg: kwargs[arg] for arg in impl.argnames if arg in kwargs}
        missing = [arg for arg in impl.argnames if arg not in kwargs]
        if missing:
            error = TypeError(f"{plugin_name}.{name} needs argument(s) not supplied: {', '.join(missing)}")
            log.error("%s", error)
            results.append((plugin_name, error))
            continue
        log.debug("broadcast %s -> %s(%s)", name, plugin_name, _types_only(call_kwargs))
        try:
            began = time.monotonic()
            outcome = impl.function(**call_kwargs)
            blocked_for = time.monotonic() - began
            if timeout is not None and blocked_for > timeout:
                log.warning("plugin %s blocked the event loop for %.3fs in %s (limit %gs); "
                            "synchronous broadcast implementations must return promptly - make it "
                            "async def", plugin_name, blocked_for, name, timeout)
            if inspect.isawaitable(outcome):
                limit = asyncio.timeout(timeout)
                try:
                    async with limit:
                        outcome = await outcome
                except TimeoutError:
                    if not limit.expired():
                        raise  # the plugin's own TimeoutError, not our limit
                    raise HookTimeout(plugin_name, name, timeout or 0.0) from None
        except asyncio.CancelledError:
            raise  # the caller is being cancelled: do not swallow it
        except Exception as exc:  # isolation: one plugin never stops the others
            platform = _platform_of(call_kwargs)
            detail = redact_for_log(pm, str(exc), (ANY_PLATFORM, platform) if platform else (ANY_PLATFORM,))
            log.error("plugin %s failed in %s: %s: %s", plugin_name, name, type(exc).__name__, detail)
            log.debug("traceback of %s.%s", plugin_name, name, exc_info=exc)
            results.append((plugin_name, exc))
            continue
        results.append((plugin_name, outcome))
    return results
