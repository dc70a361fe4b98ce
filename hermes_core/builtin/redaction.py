"""Default PII handling (seed §9, docs/behaviour.md §7): deterministic pseudonyms of canonical ids, and
text rules that keep contact details and raw platform ids out of logs, the LLM context and the
search index.

Pseudonyms (`hermes_pseudonymize`) replace *ids* in the session-context prompt when the adapter is
`pii_safe` and `[redaction] enabled`. Rules (`hermes_redaction_rules`) rewrite *free text* in the
scopes they name; the union of every plugin's rules is applied (`plugin_system.redaction`), so no
plugin can un-redact another's rule: `llm_context` on the prompt's names, topics and notes (same
condition as pseudonyms), `log` on log records through `RedactionLogFilter`. The `store` scope is
deliberately not in the defaults: the transcript keeps what the user wrote (erasing it is an
explicit purge); `index` is applied by code that indexes or exports text, through
`redact_text(..., "index")`.
"""

from __future__ import annotations

import hashlib
import re

from ..markers import hookimpl
from ..types import RedactionRule

DEFAULT_SCOPES = frozenset({"log", "llm_context", "index"})
LOG_ONLY = frozenset({"log"})


def _hex12(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:12]


def pseudonymize_id(kind: str, value: str) -> str:
    """Pseudonym of an already-canonical id.

    Args:
        kind: `"user"` → `user_<12hex>`; `"chat"` → `<prefix>:<12hex>` when the id has a
            `prefix:` part (e.g. Signal `group:…`), else `<12hex>`.
        value: the canonical id.
    """
    if kind == "user":
        return f"user_{_hex12(value)}"
    prefix, sep, rest = value.partition(":")
    if sep and prefix and rest:
        return f"{prefix}:{_hex12(rest)}"
    return _hex12(value)


@hookimpl(trylast=True)
def hermes_pseudonymize(platform, kind, value):
    """Core default: `pseudonymize_id` of the value (callers pass the canonical id)."""
    return pseudonymize_id(kind, value)


# Ordered most specific first; each replaces a match by a fixed tag, so the result does not
# depend on the order the union is applied in (a tag matches none of the patterns).
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_WHATSAPP_JID = re.compile(r"\b[0-9]{5,20}(?::[0-9]+)?@(?:s\.whatsapp\.net|c\.us|g\.us|lid|broadcast)\b")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
# Phone numbers: optional +, 8-15 digits possibly grouped by spaces, dots, dashes or brackets.
_PHONE = re.compile(r"(?<![\w+])\+?\(?[0-9]{1,4}\)?(?:[ .-]?\(?[0-9]{2,5}\)?){2,5}(?![\w])")
# Bare numeric platform ids (Telegram user/chat ids, Discord snowflakes): 9+ digits, optional
# leading minus (Telegram group ids).
_LONG_NUMBER = re.compile(r"(?<![\w.+-])[+-]?[0-9]{9,20}(?![\w])")
# Slack-style ids: U/W/B/C/G/D/T + 8-11 upper-case alphanumerics containing a digit.
_SLACK_ID = re.compile(r"\b[UWBCGDT](?=[A-Z0-9]*[0-9])[A-Z0-9]{8,11}\b")


def _digits(text: str) -> int:
    return sum(ch.isdigit() for ch in text)


_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _replace_phone(match: re.Match[str]) -> str:
    # 8..15 digits is the E.164 range; shorter groups are times and amounts; ISO dates stay.
    found = match.group(0)
    if _ISO_DATE.fullmatch(found) or not 8 <= _digits(found) <= 15:
        return found
    return "[phone]"


def redact_email(text: str) -> str:
    """Replace e-mail addresses with `[email]`."""
    return _EMAIL.sub("[email]", text)


def redact_platform_ids(text: str) -> str:
    """Replace WhatsApp JIDs, UUIDs (Signal), Slack ids and long numeric ids with tags."""
    text = _WHATSAPP_JID.sub("[jid]", text)
    text = _UUID.sub("[uuid]", text)
    text = _SLACK_ID.sub("[id]", text)
    return _LONG_NUMBER.sub("[id]", text)


def redact_phone(text: str) -> str:
    """Replace phone numbers (8-15 digits, international or grouped) with `[phone]`."""
    return _PHONE.sub(_replace_phone, text)


def redact_contact_details(text: str) -> str:
    """All default rewrites in their one safe order: WhatsApp JIDs before e-mails (a JID looks
    like an address), ids before phone numbers (a long id looks like a phone number)."""
    text = _WHATSAPP_JID.sub("[jid]", text)
    text = redact_email(text)
    text = redact_platform_ids(text)
    return redact_phone(text)


# One rule, because its parts must run in a fixed order (see redact_contact_details).
BUILTIN_RULES = (
    RedactionRule(name="contact_details", scopes=DEFAULT_SCOPES, apply=redact_contact_details),
)


@hookimpl(trylast=True)
def hermes_redaction_rules(platform):
    """Core default: the contact-details rule (e-mail, phone, platform ids) in the log,
    llm_context and index scopes."""
    return list(BUILTIN_RULES)
