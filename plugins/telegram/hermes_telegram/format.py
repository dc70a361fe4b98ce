"""Render agent text for Telegram's MarkdownV2 parse mode (Bot API "Formatting options").

Agent replies are Markdown-ish. Converting arbitrary Markdown into valid MarkdownV2 is where
upstream adapters collect their "can't parse entities" errors, so this renderer is deliberately
small: code fences (```lang … ```) become `pre` blocks and `inline code` stays code; every other
character MarkdownV2 reserves is escaped, so the rest renders literally. The adapter still falls
back to plain text when Telegram refuses the result (docs/adapters.md §1.3).

Escaping adds only backslashes, which Telegram strips during entity parsing, so the 4096-unit
limit (counted after parsing) is met whenever the plain text meets it.
"""

from __future__ import annotations

import re

# Characters that must be escaped outside code entities (Bot API, MarkdownV2 style).
_SPECIAL = re.compile(r"([_*\[\]()~`>#+\-=|{}.!\\])")
# Inside pre/code only ` and \ must be escaped.
_CODE_SPECIAL = re.compile(r"([`\\])")
# A closed fence with an optional language tag, or a closed inline code span.
_TOKENS = re.compile(r"```([A-Za-z0-9_+\-.#]*)\n(.*?)```|`([^`\n]+)`", re.S)


def escape_markdown_v2(text: str) -> str:
    """Escape `text` so MarkdownV2 shows it literally."""
    return _SPECIAL.sub(r"\\\1", text)


def to_markdown_v2(text: str) -> str:
    """Render `text` as MarkdownV2: closed code fences → pre blocks (language kept), inline code
    spans → code, everything else escaped. Unclosed fences are escaped as literal text."""
    out: list[str] = []
    pos = 0
    for match in _TOKENS.finditer(text):
        out.append(escape_markdown_v2(text[pos:match.start()]))
        if match.group(3) is not None:
            out.append("`" + _CODE_SPECIAL.sub(r"\\\1", match.group(3)) + "`")
        else:
            lang, body = match.group(1), match.group(2)
            out.append(f"```{lang}\n" + _CODE_SPECIAL.sub(r"\\\1", body) + "```")
        pos = match.end()
    out.append(escape_markdown_v2(text[pos:]))
    return "".join(out)
