"""`to_mrkdwn`: agent Markdown → Slack mrkdwn (docs/adapters.md §3.3: "convert Markdown to mrkdwn
(`*bold*`, `<url|label>`, escape `&<>`)")."""

from __future__ import annotations

import pytest

from hermes_slack.format import escape, to_mrkdwn


@pytest.mark.parametrize("text,expected", [
    ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
    ("**bold** and *italic* and __also bold__", "*bold* and _italic_ and *also bold*"),
    ("~~gone~~ plain", "~gone~ plain"),
    ("plain 1 * 2 * 3", "plain 1 * 2 * 3"),
    ("# Release notes\n## Fixes ##\ntext", "*Release notes*\n*Fixes*\ntext"),
    ("see [the guide](https://example.com/a?b=1&c=2)", "see <https://example.com/a?b=1&amp;c=2|the guide>"),
    ("ask <@U0ALICE01> in <#C0GENERAL1|general> or <https://example.com|here>",
     "ask <@U0ALICE01> in <#C0GENERAL1|general> or <https://example.com|here>"),
    ("<!channel> wake up <!here>", "&lt;!channel&gt; wake up &lt;!here&gt;"),
    ("```python\nif a < b and **x**:\n    pass\n```", "```\nif a &lt; b and **x**:\n    pass\n```"),
    ("use `a<b` and `**raw**`", "use `a&lt;b` and `**raw**`"),
    ("```\nunclosed <fence>", "```\nunclosed &lt;fence&gt;"),
])
def test_markdown_becomes_mrkdwn(text, expected):
    assert to_mrkdwn(text) == expected


def test_escape_only_touches_the_three_control_characters():
    assert escape("café 😀 & <b> 'q' \"d\"") == "café 😀 &amp; &lt;b&gt; 'q' \"d\""
