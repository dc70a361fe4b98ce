"""What the admin commands show of stored sessions (docs/operations.md §5): stored names and
messages cannot drive the operator's terminal (docs/behaviour.md §7: control, zero-width and
bidi characters printed escaped, `\\xNN`), and a session's title is shown."""

from __future__ import annotations

import json
import os
import stat

from cli_helpers import gateway_env, run

# What a chat member sent: a colour, a window-title sequence (OSC … BEL), NUL and backspaces.
HOSTILE = "ctl \x1b[31mred\x1b[0m \x1b]0;pwned\x07 \x00\x08\x08 end"
# The NUL was stored as U+FFFD (docs/behaviour.md §7), which is printable.
ESCAPED = "ctl \\x1b[31mred\\x1b[0m \\x1b]0;pwned\\x07 \ufffd\\x08\\x08 end"


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


def test_show_names_the_title_a_chat_gave_its_session(tmp_path):
    home = tmp_path / "home"
    env = gateway_env(home)
    code, out, _err = run(["chat"], env, tmp_path, stdin="/new Trip plans\nhello\n")
    assert code == 0
    code, out, _ = run(["sessions", "show", "agent:main:local:dm:terminal", "--json"], env, tmp_path)
    assert json.loads(out)["title"] == "Trip plans"
    code, out, _ = run(["sessions", "show", "agent:main:local:dm:terminal"], env, tmp_path)
    assert [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("title:")] == ["Trip plans"]


def test_list_names_each_sessions_title(tmp_path):
    home = tmp_path / "home"
    env = gateway_env(home)
    code, _out, _err = run(["chat"], env, tmp_path, stdin="hello\n/title First chat\n/new Trip plans\nhello\n")
    assert code == 0
    code, out, _ = run(["sessions", "list", "--json"], env, tmp_path)
    assert [(r["session_key"], r["title"]) for r in json.loads(out)] == [("agent:main:local:dm:terminal", "Trip plans")]
    code, out, _ = run(["sessions", "list"], env, tmp_path)
    header, row = out.splitlines()
    assert header.split()[:4] == ["SESSION", "KEY", "SESSION", "ID"] and header.split()[4] == "TITLE"
    assert row.split()[0] == "agent:main:local:dm:terminal" and " Trip plans " in row
    code, out, _ = run(["sessions", "list", "--all", "--json"], env, tmp_path)
    assert [(r["title"], r["current"]) for r in json.loads(out)] == [("Trip plans", True), ("First chat", False)]
    code, out, _ = run(["sessions", "list", "--all"], env, tmp_path)
    assert [" Trip plans " in line for line in out.splitlines()[1:]] == [True, False]
    assert [" First chat " in line for line in out.splitlines()[1:]] == [False, True]


def test_export_names_a_format_that_is_not_one_of_the_choices(tmp_path):
    # README: a bad choice is a usage error in the library's box, exit code 2; the line reads
    # like click's own choice check, without pydantic's "Value error, " prefix.
    env = gateway_env(tmp_path / "home", COLUMNS="80")
    code, out, err = run(["sessions", "export", "20250101_101010_abcdef12", "--format", "xml"], env, tmp_path)
    assert (code, out) == (2, "")
    assert err.splitlines()[3] == "│ Invalid value for '--format': 'xml' is not one of 'jsonl', 'md'.             │"
    assert "Value error" not in err


def test_undecodable_bytes_in_a_key_or_id_find_nothing_instead_of_an_encoding_error(tmp_path):
    """Bytes that are not UTF-8 (Latin-1 typed into a UTF-8 terminal) reach the command as lone
    surrogates; the store holds such text with U+FFFD in their place (docs/behaviour.md §7), so
    the commands look that up and answer as for any unknown key or id."""
    home = tmp_path / "home"
    env = gateway_env(home)
    assert run(["chat"], env, tmp_path, stdin="hello\n")[0] == 0
    undecodable = b"caf\xe9".decode("utf-8", "surrogateescape")  # the argument's bytes: c a f 0xE9
    assert run(["sessions", "show", undecodable], env, tmp_path) == (
        2, "", "hermes-gateway: error: no session with key or id 'caf\ufffd'\n")
    assert run(["sessions", "export", undecodable], env, tmp_path) == (
        2, "", "hermes-gateway: error: no session with id 'caf\ufffd'\n")
    assert run(["sessions", "delete", undecodable, "--dry-run"], env, tmp_path) == (
        2, "", "hermes-gateway: error: no session with id 'caf\ufffd'\n")
    assert run(["sessions", "erase-user", "telegram", undecodable, "--dry-run"], env, tmp_path) == (
        1, "", "hermes-gateway: nothing of telegram user 'caf\ufffd' is stored (no session, message, intake row "
               "or alias of theirs): nothing to erase\n")


def test_erase_user_of_nobody_says_so_on_stderr_with_json_too(tmp_path):
    """docs/operations.md §5: nothing of the person stored is exit 1 and one line on stderr
    naming the platform and the id; `--json` keeps stdout for the report (`"found": false`) and
    says the same line on stderr (it used to print none, so exit 1 came without a reason)."""
    home = tmp_path / "home"
    env = gateway_env(home)
    assert run(["chat"], env, tmp_path, stdin="hello\n")[0] == 0
    code, out, err = run(["sessions", "erase-user", "telegram", "42", "--json"], env, tmp_path)
    assert (code, json.loads(out)["found"], err) == (
        1, False, "hermes-gateway: nothing of telegram user '42' is stored (no session, message, intake row "
                  "or alias of theirs): nothing to erase\n")


def test_an_empty_or_impossible_key_or_id_is_named_as_what_the_command_takes(tmp_path):
    """`show` takes a session key or a session id, `export` and `delete` a session id
    (docs/operations.md §5): an empty one is refused naming that and the usage, and a `show`
    argument no session id can be (one of the store's own file names) finds no session, like
    any unknown key, instead of an error about session ids."""
    home = tmp_path / "home"
    env = gateway_env(home)
    assert run(["chat"], env, tmp_path, stdin="hello\n")[0] == 0
    for args, what in ((["show", ""], "the session key or session id must not be empty "
                                      "(hermes-gateway sessions show KEY_OR_ID)"),
                       (["show", " "], "the session key or session id must not be empty "
                                       "(hermes-gateway sessions show KEY_OR_ID)"),
                       (["export", ""], "the session id must not be empty (hermes-gateway sessions export SESSION_ID)"),
                       (["delete", "", "--yes"], "the session id must not be empty "
                                                 "(hermes-gateway sessions delete SESSION_ID)"),
                       (["show", "journal"], "no session with key or id 'journal'"),
                       (["show", ".hidden"], "no session with key or id '.hidden'")):
        assert run(["sessions", *args], env, tmp_path) == (2, "", f"hermes-gateway: error: {what}\n"), args


def test_reads_say_once_on_stderr_that_a_degraded_runs_journal_is_not_merged_yet(tmp_path):
    """docs/behaviour.md §12, docs/operations.md §5: while a degraded run's journal waits for
    the next start to merge it, `list`, `show`, `search` and `export` read the state.db without
    it, and say so in one warning line on stderr (never in the `--json` stdout)."""
    home = tmp_path / "home"
    env = gateway_env(home)
    assert run(["chat"], env, tmp_path, stdin="hello\n")[0] == 0
    saved = (home / "state.db").read_bytes()
    (home / "state.db").write_bytes(b"not a database" * 100)  # the next chat runs degraded
    code, out, _err = run(["chat"], env, tmp_path, stdin="/new\ndegraded words\n")
    assert code == 0 and out.endswith("echo: degraded words\n")
    (home / "state.db").write_bytes(saved)
    journal = home / "sessions" / "journal.jsonl"
    assert journal.is_file()
    warning = (f"hermes-gateway: WARNING: sessions and messages written during a degraded run are not shown until "
               f"the next gateway start merges them ({journal} holds them)\n")
    code, out, err = run(["sessions", "list", "--all", "--json"], env, tmp_path)
    assert (code, err, len(json.loads(out))) == (0, warning, 1)  # the degraded run's session is not there yet
    session_id = json.loads(out)[0]["session_id"]
    for args in (["show", session_id, "--json"], ["search", "hello"], ["export", session_id], ["list"]):
        code, _out, err = run(["sessions", *args], env, tmp_path)
        assert (code, err) == (0, warning), args
    assert run(["chat"], env, tmp_path, stdin="")[0] == 0  # a healthy start merges the journal
    code, out, err = run(["sessions", "list", "--all", "--json"], env, tmp_path)
    assert (code, err, len(json.loads(out))) == (0, "", 2)


def test_removals_are_refused_while_a_degraded_runs_journal_waits_to_be_merged(tmp_path):
    """docs/operations.md §5: `delete`, `erase-user` and `prune` would miss what a degraded run
    wrote (it is in its journal until the next start merges it, and the journal is kept after
    the merge), so they are refused until a start has merged it; then the erasure reaches it."""
    home = tmp_path / "home"
    env = gateway_env(home)
    assert run(["chat"], env, tmp_path, stdin="hello\n")[0] == 0
    saved = (home / "state.db").read_bytes()
    (home / "state.db").write_bytes(b"not a database" * 100)  # the next chat runs degraded
    assert run(["chat"], env, tmp_path, stdin="my number is 5551234\n")[0] == 0
    (home / "state.db").write_bytes(saved)
    journal = home / "sessions" / "journal.jsonl"
    code, out, _err = run(["sessions", "show", "agent:main:local:dm:terminal", "--json"], env, tmp_path)
    entry = json.loads(out)["entry"]
    user_id, session_id = entry["origin"]["user_id"], entry["session_id"]
    refusal = (f"hermes-gateway: error: a degraded run's journal waits to be merged into state.db ({journal}): this "
               "would not remove what that run wrote; start the gateway once (its start merges the journal), stop "
               "it, then run this again\n")
    for args in (["erase-user", "local", user_id, "--yes"], ["delete", session_id, "--yes"],
                 ["prune", "--days", "0", "--yes"], ["erase-user", "local", user_id, "--dry-run"]):
        assert run(["sessions", *args], env, tmp_path) == (2, "", refusal), args
    assert journal.is_file()
    assert run(["chat"], env, tmp_path, stdin="")[0] == 0  # a healthy start merges the journal
    code, out, _err = run(["sessions", "search", "5551234", "--json"], env, tmp_path)
    assert (code, [hit["session_id"] for hit in json.loads(out)]) == (0, [session_id, session_id])
    assert run(["sessions", "erase-user", "local", user_id, "--yes"], env, tmp_path)[0] == 0
    assert run(["sessions", "search", "5551234", "--json"], env, tmp_path) == (0, "[]\n", "")
    # What the merge set aside (its journal and the transcript copy) went with the erasure.
    assert [p.name for p in (home / "sessions").rglob("*") if p.is_file() and "5551234" in p.read_text()] == []


def test_an_export_written_to_a_new_file_is_readable_by_its_owner_only(tmp_path):
    # docs/operations.md §5: a transcript is personal data, which the gateway keeps 0600
    # (docs/behaviour.md §3); an export to a new file is made so too, whatever the umask. A file
    # that exists keeps the mode its owner gave it.
    home = tmp_path / "home"
    env = gateway_env(home)
    code, _out, _err = run(["chat"], env, tmp_path, stdin="hello pelican\n")
    assert code == 0
    code, listed, _ = run(["sessions", "list", "--json"], env, tmp_path)
    session_id = json.loads(listed)[0]["session_id"]
    existing = tmp_path / "shared.jsonl"
    existing.write_text("old\n")
    existing.chmod(0o640)
    umask = os.umask(0o022)
    try:
        for target in (tmp_path / "new.jsonl", existing):
            code, out, err = run(["sessions", "export", session_id, "-o", str(target)], env, tmp_path)
            assert (code, out, err) == (0, "", "")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.jsonl").stat().st_mode) == 0o600
    assert stat.S_IMODE(existing.stat().st_mode) == 0o640
    for target in (tmp_path / "new.jsonl", existing):
        rows = [json.loads(line) for line in target.read_text().splitlines()]
        assert [(r["role"], r["content"]) for r in rows] == [("user", "hello pelican"), ("assistant", "echo: hello pelican")]
