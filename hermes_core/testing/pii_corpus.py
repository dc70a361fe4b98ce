"""A shared corpus of PII samples for `RedactionContract` (seed §9; docs/adapters.md id formats).

Each sample is a raw value that must never reach the `log`, `llm_context` or `index` scopes,
embedded in a sentence the way users and logs carry it. All values are made up.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PiiSample:
    """One secret value and a text carrying it.

    Attributes:
        kind: `email`, `phone`, `user_id`, `chat_id`, `jid`, `uuid`.
        platform: the platform the id belongs to (`"any"` for contact details).
        secret: the raw value that must disappear.
        text: a sentence containing `secret`.
    """

    kind: str
    platform: str
    secret: str
    text: str


PII_SAMPLES: tuple[PiiSample, ...] = (
    PiiSample("email", "any", "alice.smith+hermes@example.com",
              "please write to alice.smith+hermes@example.com before noon"),
    PiiSample("email", "any", "bob@mail.example.co.uk", "Contact: bob@mail.example.co.uk."),
    PiiSample("phone", "any", "+1 555 123 4567", "call me on +1 555 123 4567 tonight"),
    PiiSample("phone", "any", "+44 20 7946 0958", "office line +44 20 7946 0958 (ext 2)"),
    PiiSample("phone", "any", "030-1234-5678", "my number is 030-1234-5678"),
    PiiSample("phone", "any", "+4915112345678", "Signal me: +4915112345678"),
    PiiSample("user_id", "telegram", "123456789", "telegram user 123456789 joined"),
    PiiSample("chat_id", "telegram", "-1001234567890", "supergroup -1001234567890 migrated"),
    PiiSample("user_id", "discord", "80351110224678912", "discord author 80351110224678912 posted"),
    PiiSample("user_id", "slack", "U024BE7LH", "slack user U024BE7LH reacted"),
    PiiSample("chat_id", "slack", "C0123ABCD9", "in channel C0123ABCD9 today"),
    PiiSample("jid", "whatsapp", "15551234567@s.whatsapp.net", "from 15551234567@s.whatsapp.net:"),
    PiiSample("jid", "whatsapp", "15551234567:12@s.whatsapp.net", "device 15551234567:12@s.whatsapp.net said hi"),
    PiiSample("jid", "whatsapp", "120363025555555555@g.us", "group 120363025555555555@g.us renamed"),
    PiiSample("jid", "whatsapp", "98765432101234@lid", "lid 98765432101234@lid mapped"),
    PiiSample("uuid", "signal", "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
              "signal sender 3f2504e0-4f89-11d3-9a0c-0305e82c3301 typed"),
)

# Text that must come through unchanged: redaction must not eat ordinary content.
NON_PII_TEXTS: tuple[str, ...] = (
    "meet at 10:30 on 2026-01-05",
    "the price is 1,299.00 and python 3.11.7",
    "room 42, floor 3",
)


def samples_for(platform: str) -> tuple[PiiSample, ...]:
    """Contact-detail samples plus the id samples of `platform`."""
    return tuple(s for s in PII_SAMPLES if s.platform in ("any", platform))
