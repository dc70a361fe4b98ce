"""Stored names and messages cannot drive the operator's terminal (docs/behaviour.md §7): the
admin commands print control, zero-width and bidi characters escaped (`\\xNN`)."""

from __future__ import annotations

import json

from cli_helpers import gateway_env, run

# What a chat member sent: a colour, a window-title sequence (OSC … BEL), NUL and backspaces.
HOSTILE = "ctl \x1b[31mred\x1b[0m \x1b]0;pwned\x07 \x00\x08\x08 end"
ESCAPED = "ctl \\x1b[31mred\\x1b[0m \\x1b]0;pwned\\x07 \\x00\\x08\\x08 end"


def test_show_search_and_markdown_export_escape_what_a_chat_member_stored(tmp_path):
    home = tmp_path / "home"
    env = gateway_env(home)
    code, _out, _err = run(["chat"], env, tmp_path, stdin=HOSTILE + "\n")
    assert code == 0
    code, listed, _ = run(["sessions", "list", "--json"], env, tmp_path)
    session_id = json.loads(listed)[0]["session_id"]
    for args in (["sessions", "show", session_id], ["sessions", "search", "pwned"],
                 ["sessions", "export", session_id, "--format", "md"]):
        code, out, err = run(args, env, tmp_path)
        assert code == 0, (args, err)
        assert not any(ch in out for ch in "\x1b\x07\x00\x08"), args
        assert "\\x1b" in out, (args, out)
    code, out, _ = run(["sessions", "export", session_id, "--format", "md"], env, tmp_path)
    assert ESCAPED in out
