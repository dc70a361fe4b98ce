"""Text hygiene for what peers send (docs/behaviour.md §7): valid Unicode everywhere, and
peer-controlled metadata made inert before it reaches a prompt, a sender prefix or a terminal.

* `clean_text` / `clean_data`: lone surrogates (undecodable bytes smuggled in by
  `surrogateescape`, or a broken UTF-16 source) and NUL characters become U+FFFD, so a message,
  a name or a file name can always be stored (on every store engine) and sent. Applied when a SessionSource or MessageEvent is built.
* `neutralize_inline`: the one-line, unquoted form of an untrusted label (the `[sender name]`
  prefix): C0 and C1 control characters, DEL, newlines and line/paragraph separators collapsed
  to one space, invisible format characters (`_INVISIBLE`) removed, length capped.
* `quote_untrusted`: `neutralize_inline`, then JSON-quoted (the context section's quoted values).
* `strip_invisible`: the invisible format characters removed (what a command's name is looked up
  by, docs/behaviour.md §11); `skip_invisible`: where a run of them ends (what a command's
  slash is found after).
* `escape_controls`: control and invisible format characters shown as `\\xNN` / `\\uNNNN` /
  `\\UNNNNNNNN`, for printing stored text to an operator's terminal (the admin CLI).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

UNTRUSTED_MAX_CHARS = 240

# Zero-width, bidi and other invisible format characters: invisible, yet they reorder or hide what
# a reader (or a model) sees. U+200B-U+200F (zero-width space/joiners, LRM/RLM), U+202A-U+202E
# (embeddings and overrides), U+2060-U+2064 (word joiner, invisible operators), U+2066-U+2069
# (isolates), U+206A-U+206F (deprecated shaping controls), U+FEFF (zero-width no-break space /
# BOM), U+061C (Arabic letter mark), U+180E (Mongolian vowel separator), U+00AD (soft hyphen),
# U+FFF9-U+FFFB (interlinear annotation), U+1BCA0-U+1BCA3 (shorthand format controls),
# U+1D173-U+1D17A (musical format controls) and U+E0000-U+E007F, the tag characters: they mirror
# ASCII invisibly, so a display name could carry a hidden sentence into a prompt.
_INVISIBLE = ("\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\u061c\u180e\u00ad\ufff9-\ufffb"
              "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e007f")
# Collapsed to a space: C0 controls (newline and tab included), DEL, C1 controls, line and
# paragraph separators.
_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_INVISIBLE_RE = re.compile(f"[{_INVISIBLE}]")
_INVISIBLE_RUN = re.compile(f"[{_INVISIBLE}]*")
# What the admin CLI escapes: every control character except newline and tab, plus the invisible ones.
_TERMINAL_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_INVISIBLE}]")


def clean_text(text: str | None) -> str:
    """Return `text` as valid Unicode (None → `""`): undecodable input bytes that Python smuggled
    in as lone surrogates (`surrogateescape`, e.g. Latin-1 typed into a UTF-8 terminal) and any
    other lone surrogate become U+FFFD; a surrogate pair split into two code points is joined.
    U+0000 becomes U+FFFD too: it is valid Unicode, but PostgreSQL's text cannot hold it, and a
    message is stored alike on every engine. Text that is already valid is returned as is (the
    common, fast path)."""
    if not text:
        return ""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # not (only) escaped bytes: a broken UTF-16 source
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_optional(value: Any) -> Any:
    """`clean_text` for a string; None and non-strings are returned unchanged."""
    return clean_text(value) if isinstance(value, str) else value


def clean_data(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, strings, numbers) with every string — keys included —
    passed through `clean_text`. Other values are returned unchanged."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_data(k): clean_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(clean_data(v) for v in value)
    return value


def strip_invisible(text: str) -> str:
    """`text` without its invisible format characters (zero-width, bidi controls, soft hyphen, tag
    characters: `_INVISIBLE`, the characters of Unicode category Cf that are not drawn; marks that
    are, such as the Arabic number sign U+0600, are kept): `"undo\u200b"` → `"undo"`."""
    return _INVISIBLE_RE.sub("", text)


def skip_invisible(text: str, start: int = 0) -> int:
    """The index of the first character of `text` at or after `start` (an index, 0 ≤ start ≤
    len(text)) that is not one of `strip_invisible`'s invisible format characters; `len(text)`
    when only those follow: `skip_invisible("\u200b\ufeff/undo")` → 2. Reads only the run it
    skips, so finding where a long message's visible text begins costs nothing."""
    return _INVISIBLE_RUN.match(text, start).end()


def neutralize_inline(text: Any, max_chars: int = UNTRUSTED_MAX_CHARS) -> str:
    """The inert one-line form of untrusted metadata (docs/behaviour.md §7), unquoted.

    Args:
        text: a display name, chat name, topic… (None → `""`; other objects via `str`).
        max_chars: longest result in characters; a longer text is cut and ends with `…`.
    """
    if text is None:
        return ""
    cleaned = strip_invisible(clean_text(str(text)))
    cleaned = " ".join(_BREAKING.sub(" ", cleaned).split())
    if len(cleaned) > max_chars:
        cleaned = cleaned[: max_chars - 1] + "…"
    return cleaned


# Datetimes and dataclasses are left to the standard encoder, which refuses them: orjson would
# write a naive datetime without its offset (docs/behaviour.md §0) and a dataclass as an object.
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def to_json(value: Any) -> str:
    """`value` as compact JSON text (non-ASCII kept as is, no spaces): what the store keeps
    (entries, intake payloads, origins, sent ids) and how prompts quote values. orjson, not the
    standard `json`: every message encodes several of these, and the session entry alone cost
    the standard encoder about ten times as much (benchmarks/bench_throughput.py). Non-string
    keys become strings, as `json.dumps` makes them; NaN and infinities become `null` (JSON has
    no form for them). What orjson refuses goes to the standard encoder, which decides as the
    store always did: it writes integers beyond 64 bits and nesting deeper than orjson's 254
    levels, and names the type it cannot encode.

    Raises:
        TypeError: `value` holds something JSON has no form for (the message names its type: a
            datetime, a set, an object…) or a key that is not str, int, float, bool or None.
        ValueError: a string holds a lone surrogate (not valid Unicode, docs/behaviour.md §7),
            `value` contains itself, or a NaN sits in a value only the standard encoder writes.
    """
    try:
        return orjson.dumps(value, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:
        pass
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text with a lone surrogate ({exc.object[exc.start]!a}) is not valid Unicode") from None
    return text


def quote_untrusted(text: Any, max_chars: int = UNTRUSTED_MAX_CHARS) -> str:
    """`neutralize_inline(text)`, JSON-quoted: `Dev "Team"` → `"Dev \\"Team\\""`."""
    return to_json(neutralize_inline(text, max_chars))


def escape_controls(text: Any) -> str:
    """`text` safe for a terminal: control characters (except newline and tab) and the invisible
    format characters (`strip_invisible`'s) become `\\xNN` / `\\uNNNN` / `\\UNNNNNNNN`, so
    stored text cannot drive the operator's terminal or hide in it (docs/behaviour.md §7, admin
    CLI)."""
    def escape(match: re.Match[str]) -> str:
        code = ord(match.group())
        if code < 0x100:
            return f"\\x{code:02x}"
        return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"

    return _TERMINAL_UNSAFE.sub(escape, clean_text(str(text)) if text is not None else "")


# Longest display name in a `[sender name]` prefix, in characters.
SENDER_NAME_MAX_CHARS = 64


def sender_label(name: str) -> str:
    """The sender prefix of a user message in a shared session, `[name] ` (seed §5;
    docs/behaviour.md §7): `name` made inert on one line, brackets turned into parentheses,
    `SENDER_NAME_MAX_CHARS` at most; `[unknown] ` when nothing is left. The pipeline builds
    `name` (display name, id or pseudonym); erasure matches stored messages against it."""
    clean = neutralize_inline((name or "").replace("[", "(").replace("]", ")"), SENDER_NAME_MAX_CHARS)
    return f"[{clean or 'unknown'}] "
