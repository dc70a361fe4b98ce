"""`hermes-gateway status` beside a running `chat` gateway (docs/operations.md §2): what it
reports, read from the status file and the lock probe without disturbing the gateway."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

from cli_helpers import gateway_env, run, start_published_chat


async def _status(home, cwd) -> tuple[int, dict]:
    code, out, err = await asyncio.to_thread(run, ["status", "--json"], gateway_env(home), cwd)
    assert err == ""
    return code, json.loads(out)


async def test_status_of_a_running_gateway_then_of_a_stopped_one(tmp_path):
    home = tmp_path / "home"
    code, report = await _status(home, tmp_path)
    # No gateway has run here: nothing to say about a last stop.
    assert (code, report) == (3, {"running": False, "pid": None, "home": str(home), "last": None,
                                  "clean_stop": None})

    proc = await start_published_chat(home)
    try:
        code, report = await _status(home, tmp_path)
        assert code == 0
        assert (report["running"], report["pid"], report["state"], report["ready"]) == (True, proc.pid, "running", True)
        assert report["platforms"] == {"local": {"ok": True}}
        assert (report["busy_sessions"], report["queue_depth"], report["ledger_backlog"],
                report["store_degraded"]) == (0, 0, 0, False)
        assert report["home"] == str(home) and report["uptime_s"] >= 0
        code, text, err = await asyncio.to_thread(run, ["status"], gateway_env(home), tmp_path)
        assert code == 0 and err == ""
        assert f"gateway:        running on {home}" in text and f"pid:            {proc.pid}" in text
        assert "local     yes" in text
        # The gateway was not disturbed: it still answers.
        proc.stdin.write(b"again\n")
        await proc.stdin.drain()
        assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"echo: again\n"
    finally:
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    code, report = await _status(home, tmp_path)
    assert (code, report["running"], report["last"]["state"], report["last"]["pid"], report["clean_stop"]) == (
        3, False, "stopped", proc.pid, True)
    code, text, _ = await asyncio.to_thread(run, ["status"], gateway_env(home), tmp_path)
    assert text.startswith(f"no gateway is running on {home} (last seen ")
    assert len(text.splitlines()) == 1  # a clean stop: no word about recovery
    assert text.rstrip().endswith(f"pid {proc.pid})")


async def test_the_uptime_shown_is_the_uptime_now(tmp_path):
    """docs/operations.md §2: the uptime `status` shows is the gateway's now, not the one its
    last snapshot held (written every `[status] interval_s`, here an hour)."""
    home = tmp_path / "home"
    proc = await start_published_chat(home, HERMES_STATUS__INTERVAL_S="3600")
    try:
        snapshot = json.loads((home / "status.json").read_text())
        written = datetime.now(timezone.utc) - timedelta(seconds=100)
        snapshot.update(uptime_s=5.0, updated_at=written.isoformat())
        (home / "status.json").write_text(json.dumps(snapshot))
        _code, report = await _status(home, tmp_path)
        assert 105 <= report["uptime_s"] < 105 + 60
        snapshot.update(updated_at=None)  # no time of writing: the snapshot's own
        (home / "status.json").write_text(json.dumps(snapshot))
        _code, report = await _status(home, tmp_path)
        assert report["uptime_s"] == 5.0
    finally:
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 60) == 0


async def test_a_damaged_status_file_is_reported_in_one_line(tmp_path):
    """docs/operations.md §2: a status.json that is not a whole snapshot (a field missing, a
    field of the wrong type) is `stale`, never a traceback; a home that is a file has no last
    stop to speak of."""
    home = tmp_path / "home"
    proc = await start_published_chat(home, HERMES_STATUS__INTERVAL_S="3600")  # no rewrite meanwhile
    env = gateway_env(home, HERMES_STATUS__INTERVAL_S="3600")
    try:
        good = json.loads((home / "status.json").read_text())
        for damaged in ({"pid": proc.pid}, {**good, "platforms": {"local": True}}, {**good, "uptime_s": "x"},
                        {**good, "updated_at": None, "home": 7}):
            (home / "status.json").write_text(json.dumps(damaged))
            code, report = await _status(home, tmp_path)
            assert (code, report) == (0, {"running": True, "pid": proc.pid, "home": str(home), "stale": True})
            code, text, err = await asyncio.to_thread(run, ["status"], env, tmp_path)
            assert (code, err, text) == (0, "", f"a gateway is running on {home} (pid {proc.pid}) but has not "
                                                "published a readable status yet\n")
    finally:
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 60) == 0

    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("x")
    code, report = await _status(in_the_way, tmp_path)
    assert (code, report) == (3, {"running": False, "pid": None, "home": str(in_the_way), "last": None,
                                  "clean_stop": None})


async def test_a_config_that_no_longer_loads_does_not_hide_the_running_gateway(tmp_path):
    """docs/operations.md §2: `status` needs only the home; a config edited into an invalid one
    while the gateway runs is named in a warning, and the gateway is still reported."""
    home = tmp_path / "home"
    proc = await start_published_chat(home)
    try:
        (home / "hermes.toml").write_text('[core]\nbusy_input_mode = "bogus"\n')
        code, out, err = await asyncio.to_thread(run, ["status", "--json"], gateway_env(home), tmp_path)
        assert (code, json.loads(out)["running"], json.loads(out)["pid"]) == (0, True, proc.pid)
        assert err == ("hermes-gateway: WARNING: invalid config value for 'core.busy_input_mode': Input should be "
                       f"'interrupt', 'queue' or 'steer', got 'bogus' (config file {home / 'hermes.toml'}); "
                       f"showing the status of {home}\n")
    finally:
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    code, out, _err = await asyncio.to_thread(run, ["status"], gateway_env(home), tmp_path)
    assert code == 3 and out.startswith(f"no gateway is running on {home} (last seen ")


def test_a_home_that_is_a_file_is_said_to_be_one(tmp_path):
    """`status` on a HERMES_HOME that is a regular file: not running (exit 3, as `--json` says),
    and the text says why none can run there."""
    home = tmp_path / "afile"
    home.write_text("not a folder")
    assert run(["status"], gateway_env(home), tmp_path) == (
        3, f"no gateway is running on {home}: it is a file, not a directory (HERMES_HOME)\n", "")
