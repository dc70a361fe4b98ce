"""Render agent text (Markdown-ish) as Slack mrkdwn (docs/adapters.md §3.3).

Slack reads `&`, `<` and `>` as the start of its own control sequences, so they are escaped
(`&amp;`, `&lt;`, `&gt;`) everywhere — inside code too, as Slack's formatting reference asks.
On top of that a small, predictable conversion: `**bold**`/`__bold__` → `*bold*`, `*italic*` →
`_italic_`, `~~strike~~` → `~strike~`, `# Heading` → `*Heading*`, `[label](url)` →
`<url|label>`, and code fences lose their language tag (Slack shows it as text). Code spans and
fences are otherwise left as written.

Three Slack sequences the agent may write on purpose pass through unescaped: user mentions
`<@U…>`, channel links `<#C…>` / `<#C…|name>` and links `<https://…|label>`. Broadcast
specials (`<!here>`, `<!channel>`, `<!everyone>`) are escaped, so a reply can never page a
whole channel.

A published converter was tried (markdown-to-mrkdwn 0.3.3): it escapes nothing and turns
`1 * 2 * 3` into italics, so this module keeps the conversion small and tested instead.
"""

from __future__ import annotations

import re

# Closed code fences (language tag dropped) and inline code spans.
_CODE = re.compile(r"```[^\n`]*\n(.*?)```|`([^`\n]+)`", re.S)
# Slack sequences allowed through, and Markdown links (converted).
_PASSTHROUGH = re.compile(r"<@[UW][A-Z0-9]+>|<#C[A-Z0-9]+(?:\|[^<>\n]*)?>|<(?:https?://|mailto:)[^<>|\s]+(?:\|[^<>\n]*)?>")
_MD_LINK = re.compile(r"\[([^\[\]\n]+)\]\(((?:https?://|mailto:)[^()\s<>]+)\)")
_ITALIC = re.compile(r"(?<![*\w])\*(?![\s*])([^*\n]+?)(?<![\s*])\*(?![*\w])")
_BOLD = re.compile(r"\*\*(?!\s)([^\n]+?)(?<!\s)\*\*|__(?!\s)([^\n]+?)(?<!\s)__")
_STRIKE = re.compile(r"~~(?!\s)([^\n]+?)(?<!\s)~~")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def escape(text: str) -> str:
    """Escape Slack's three control characters: `&` → `&amp;`, `<` → `&lt;`, `>` → `&gt;`."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _inline(text: str) -> str:
    """Plain (non-code) text: escape, then convert emphasis and headings."""
    text = escape(text)
    text = _HEADING.sub(lambda m: f"**{m.group(1)}**", text)  # bold, converted below
    text = _ITALIC.sub(lambda m: f"_{m.group(1)}_", text)
    text = _BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", text)
    return _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)


def _links(text: str) -> str:
    """Text outside code: keep allowed Slack sequences, convert Markdown links, format the rest."""
    out: list[str] = []
    pos = 0
    tokens = sorted(list(_PASSTHROUGH.finditer(text)) + list(_MD_LINK.finditer(text)), key=lambda m: m.start())
    for match in tokens:
        if match.start() < pos:
            continue  # overlaps a token already taken
        out.append(_inline(text[pos:match.start()]))
        if match.re is _MD_LINK:
            label = escape(match.group(1)).replace("|", "\N{DIVIDES}")
            out.append(f"<{escape(match.group(2))}|{label}>")
        else:
            out.append(match.group(0))
        pos = match.end()
    out.append(_inline(text[pos:]))
    return "".join(out)


def to_mrkdwn(text: str) -> str:
    """Render `text` as Slack mrkdwn (module docstring). Unclosed fences are formatted as text."""
    out: list[str] = []
    pos = 0
    for match in _CODE.finditer(text):
        out.append(_links(text[pos:match.start()]))
        if match.group(2) is not None:
            out.append("`" + escape(match.group(2)) + "`")
        else:
            out.append("```\n" + escape(match.group(1)) + "```")
        pos = match.end()
    out.append(_links(text[pos:]))
    return "".join(out)
