"""Apply the union of redaction rules (seed §9; docs/architecture.md §2 `hermes_redaction_rules`).

Every plugin's rules for a platform are collected and applied in a fixed order (rule name),
so the outcome does not depend on registration order, and a rule can only remove text: no
plugin can un-redact what another's rule removed.

Where each scope is applied by the core:

* `llm_context` — `pipeline.context.build_session_context_prompt` passes the peer-controlled
  text of the session-context prompt (display names, chat names, topics, plugin notes) through
  `redact_text(..., "llm_context")` whenever it pseudonymises ids (`[redaction] enabled` and a
  `pii_safe` adapter).
* `log` — `RedactionLogFilter`, attached to the gateway's log handlers with
  `install_log_redaction`, rewrites every record's message (and formatted traceback);
  `dispatch.call_broadcast` also passes plugin exception texts through `redact_for_log`.
* `store` / `index` — not applied automatically: transcripts keep what the user wrote (erasing
  is an explicit purge). Code that exports or indexes text calls `redact_text(pm, platform,
  text, "store" | "index")` itself.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable

from ..types import RedactionRule

log = logging.getLogger(__name__)

SCOPES = frozenset({"log", "llm_context", "store", "index"})
# `platform` value for text not tied to one platform (a log line): rules that apply everywhere.
ANY_PLATFORM = "*"


def redaction_rules(pm, platform: str, scope: str | None = None) -> list[RedactionRule]:
    """The union of `hermes_redaction_rules(platform)` from every plugin, optionally only those
    active in `scope`, sorted by rule name.

    Raises:
        ValueError: `scope` is not one of log / llm_context / store / index.
        TypeError: a plugin returned something that is not a `RedactionRule`.
    """
    if scope is not None and scope not in SCOPES:
        raise ValueError(f"unknown redaction scope {scope!r}; expected one of {', '.join(sorted(SCOPES))}")
    rules: list[RedactionRule] = []
    for batch in pm.hook.hermes_redaction_rules(platform=platform):
        for rule in batch or ():
            if not isinstance(rule, RedactionRule):
                raise TypeError(f"hermes_redaction_rules returned {type(rule).__name__}, not RedactionRule")
            if scope is None or scope in rule.scopes:
                rules.append(rule)
    return sorted(rules, key=lambda r: r.name)


def redact_text(pm, platform: str, text: str, scope: str) -> str:
    """`text` with every rule of `platform` active in `scope` applied.

    Args:
        pm: the plugin manager.
        platform: the platform id the text belongs to (`ANY_PLATFORM` for none in particular).
        text: the text to rewrite.
        scope: `log`, `llm_context`, `store` or `index`.

    A rule that raises is skipped and logged by name only (never with the text), and the text
    continues through the other rules.

    Raises:
        ValueError: unknown `scope`.
    """
    for rule in redaction_rules(pm, platform, scope):
        try:
            text = rule.apply(text)
        except Exception as exc:  # one broken rule must not disable the others
            log.error("redaction rule %s failed: %s", rule.name, type(exc).__name__)
    return text


def log_rules(pm, platforms: Iterable[str] = (ANY_PLATFORM,)) -> list[RedactionRule]:
    """The union of `log`-scope rules over `platforms` (duplicates once), sorted by name."""
    unique: dict[tuple[str, int], RedactionRule] = {}
    for platform in platforms:
        for rule in redaction_rules(pm, platform, "log"):
            unique.setdefault((rule.name, id(rule.apply)), rule)
    return sorted(unique.values(), key=lambda r: r.name)


def redact_for_log(pm, text: str, platforms: Iterable[str] = (ANY_PLATFORM,)) -> str:
    """`text` through the log-scope rules of `platforms`, failing closed.

    Unlike `redact_text`, a failing rule (or a failing `hermes_redaction_rules` hook) does not
    let the text through: the result is then `[redacted: <reason>]`, because this is called on
    the way *into* a log and must neither leak nor log recursively.
    """
    try:
        rules = log_rules(pm, platforms)
    except Exception as exc:
        return f"[redacted: redaction rules unavailable ({type(exc).__name__})]"
    return _apply_closed(rules, text)


def _apply_closed(rules: list[RedactionRule], text: str) -> str:
    for rule in rules:
        try:
            text = rule.apply(text)
        except Exception as exc:
            return f"[redacted: rule {rule.name} failed ({type(exc).__name__})]"
    return text


class RedactionLogFilter(logging.Filter):
    """A `logging.Filter` that rewrites each record through the `log`-scope redaction rules.

    Args:
        pm: the plugin manager (its `hermes_redaction_rules` give the rules).
        platforms: platform ids whose rules apply to records that do not name one (default:
            `ANY_PLATFORM` only; the gateway passes its enabled platforms). A record logged with
            `extra={"platform": "telegram"}` also gets that platform's rules.

    Rules are collected once per platform and cached (plugins register before logging starts);
    `refresh()` forgets the cache. The filter never drops a record: it replaces `msg` by the
    redacted, fully formatted message (`args` emptied) and pre-formats a traceback into the
    redacted `exc_text`, so every formatter downstream prints only redacted text. A failing rule
    withholds the message (`[redacted: …]`) instead of leaking it, and so does logging from inside
    a rule (which would otherwise recurse).
    """

    def __init__(self, pm: Any, platforms: Iterable[str] = (ANY_PLATFORM,)):
        super().__init__()
        self.pm = pm
        self.platforms = tuple(dict.fromkeys([ANY_PLATFORM, *platforms]))
        self._rules: dict[str, list[RedactionRule]] = {}
        self._lock = threading.Lock()
        self._busy = threading.local()

    def refresh(self) -> None:
        """Forget the cached rules (after registering a plugin that adds some)."""
        with self._lock:
            self._rules.clear()

    def _rules_for(self, extra_platform: str | None) -> list[RedactionRule]:
        key = extra_platform or ""
        with self._lock:
            cached = self._rules.get(key)
        if cached is None:
            platforms = self.platforms + ((extra_platform,) if extra_platform else ())
            cached = log_rules(self.pm, platforms)
            with self._lock:
                self._rules[key] = cached
        return cached

    def redact(self, text: str, platform: str | None = None) -> str:
        """`text` through this filter's rules (plus `platform`'s), failing closed."""
        try:
            rules = self._rules_for(platform)
        except Exception as exc:
            return f"[redacted: redaction rules unavailable ({type(exc).__name__})]"
        return _apply_closed(rules, text)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(self._busy, "on", False):
            # A rule logged while rewriting another record: its text may hold what is being
            # redacted, and running the rules again would recurse, so it is withheld.
            record.msg, record.args = "[redacted: logged from inside a redaction rule]", ()
            record.exc_info = record.exc_text = record.stack_info = None
            return True
        self._busy.on = True
        try:
            platform = getattr(record, "platform", None)
            platform = platform if isinstance(platform, str) and platform else None
            try:
                message = record.getMessage()
            except Exception as exc:  # a bad format string: say so without the arguments
                message = f"[unformattable log message: {type(exc).__name__}]"
            record.msg = self.redact(message, platform)
            record.args = ()
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                record.exc_text = self.redact(record.exc_text, platform)
            if record.stack_info:
                record.stack_info = self.redact(record.stack_info, platform)
        finally:
            self._busy.on = False
        return True


def install_log_redaction(pm: Any, target: logging.Handler | logging.Logger | None = None, *,
                          platforms: Iterable[str] = (ANY_PLATFORM,)) -> Callable[[], None]:
    """Attach one `RedactionLogFilter` to `target` and return the function that removes it.

    Args:
        pm: the plugin manager.
        target: a `logging.Handler`, or a `logging.Logger` whose current handlers all get the
            filter (default: the root logger). Filters go on *handlers* because a logger's own
            filters do not see records propagated from child loggers.
        platforms: see `RedactionLogFilter` (the gateway passes `config.enabled_platforms()`).

    Returns:
        `uninstall()`: removes the filter from every handler it was added to; idempotent.
    """
    target = logging.getLogger() if target is None else target
    handlers = [target] if isinstance(target, logging.Handler) else list(target.handlers)
    log_filter = RedactionLogFilter(pm, platforms)
    for handler in handlers:
        handler.addFilter(log_filter)

    def uninstall() -> None:
        for handler in handlers:
            handler.removeFilter(log_filter)

    uninstall.filter = log_filter  # type: ignore[attr-defined]  # for tests and diagnostics
    return uninstall
