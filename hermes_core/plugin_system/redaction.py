"""Apply the union of redaction rules (seed §9; CONVENTIONS.md §2 `hermes_redaction_rules`).

Every plugin's rules for a platform are collected and applied in a fixed order (rule name,
then plugin name), so the outcome does not depend on registration order, and a rule can only
remove text: no plugin can un-redact what another's rule removed.
"""

from __future__ import annotations

import logging

from ..types import RedactionRule

log = logging.getLogger(__name__)

SCOPES = frozenset({"log", "llm_context", "store", "index"})


def redaction_rules(pm, platform: str, scope: str | None = None) -> list[RedactionRule]:
    """The union of `hermes_redaction_rules(platform)` from every plugin, optionally only those
    active in `scope`, sorted by rule name.

    Raises:
        ValueError: `scope` is not one of log / llm_context / store / index.
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

    A rule that raises is skipped and logged by name only (never with the text), and the text
    continues through the other rules.
    """
    for rule in redaction_rules(pm, platform, scope):
        try:
            text = rule.apply(text)
        except Exception as exc:  # one broken rule must not disable the others
            log.error("redaction rule %s failed: %s", rule.name, type(exc).__name__)
    return text
