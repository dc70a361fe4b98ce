"""GatewayApp start-up and shutdown (seed §7 `.clean_shutdown`; docs/behaviour.md §6)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from hermes_core.agents import EchoAgent
from hermes_core.app import GatewayApp, StartupError
from hermes_core.model import MessageEvent
from hermes_core.platforms.local import LocalAdapter
from hermes_core.settings import GatewayConfig

T0 = datetime(2026, 5, 6, 7, 8, 9, tzinfo=timezone.utc)


def _app(home, **kw):
    import io

    adapter = LocalAdapter(stdin=io.StringIO(""), stdout=io.StringIO(), user="alice")
    return GatewayApp(GatewayConfig(home=home, platforms={"testchat": {"allow_all": True}}), adapters=[adapter], agent=EchoAgent(),
                      watcher=False, clock=lambda: T0, **kw), adapter


async def _one_turn(home):
    app, adapter = _app(home)
    await app.start()
    await app.runner.handle(MessageEvent(source=adapter.source, text="hi"))
    await app.runner.join()
    return app


async def _next_start_is_unclean(home) -> bool:
    """Start a gateway on `home` and stop it again; whether that start read the last stop as unclean."""
    again, _ = _app(home)
    await again.start()
    try:
        return again.unclean_start
    finally:
        await again.stop()


async def test_clean_stop_writes_marker_and_next_start_consumes_it(tmp_path):
    app = await _one_turn(tmp_path)
    await app.stop()
    # written empty, as upstream writes it; an empty marker counts as clean (docs/behaviour.md §6)
    assert (tmp_path / ".clean_shutdown").read_bytes() == b""
    again, _ = _app(tmp_path)
    await again.start()
    try:
        assert again.unclean_start is False
        assert not (tmp_path / ".clean_shutdown").exists()
    finally:
        await again.stop()


@pytest.mark.parametrize("content", ["", "\n", "2026-05-06T07:08:09+00:00\n"])
async def test_an_empty_or_older_timestamp_marker_is_clean(tmp_path, content):
    app = await _one_turn(tmp_path)
    await app.stop()
    (tmp_path / ".clean_shutdown").write_text(content)
    assert await _next_start_is_unclean(tmp_path) is False


async def test_a_marker_that_cannot_be_removed_makes_the_start_unclean(tmp_path, monkeypatch):
    app = await _one_turn(tmp_path)
    await app.stop()
    marker = tmp_path / ".clean_shutdown"
    real_unlink = type(marker).unlink

    def refuse(self, *a, **kw):
        if self.name == ".clean_shutdown":
            raise PermissionError(13, "Permission denied")
        return real_unlink(self, *a, **kw)
    monkeypatch.setattr(type(marker), "unlink", refuse)
    again, _ = _app(tmp_path)
    await again.start()
    try:
        assert again.unclean_start is True
        assert marker.read_text() == "invalid\n"
    finally:
        await again.stop()


@pytest.mark.parametrize("content", [None, "invalid\n", "garbage"])
async def test_missing_or_invalid_marker_means_unclean(tmp_path, content):
    app = await _one_turn(tmp_path)
    await app.stop()
    marker = tmp_path / ".clean_shutdown"
    if content is None:
        marker.unlink()
    else:
        marker.write_text(content)
    again, _ = _app(tmp_path)
    await again.start()
    try:
        assert again.unclean_start is True
        assert again.recovered_keys == []  # the turn had completed: nothing to resume
        assert not marker.exists()
    finally:
        await again.stop()


async def test_first_start_on_an_empty_home_is_not_unclean(tmp_path):
    app, _ = _app(tmp_path / "fresh")
    await app.start()
    try:
        assert app.unclean_start is False
    finally:
        await app.stop()


async def test_first_start_beside_an_older_gateways_sessions_folder_is_not_unclean(tmp_path, caplog):
    # docs/behaviour.md §3: the first start takes the older gateway's sessions.json into the new
    # state.db; no run of this gateway wrote that file, so none was interrupted and none is told.
    import json
    import logging

    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "sessions.json").write_text(json.dumps({"agent:main:telegram:dm:12345": {
        "session_key": "agent:main:telegram:dm:12345", "session_id": "20250101_101010_abcdef12",
        "created_at": "2025-01-01T10:10:10", "updated_at": "2025-01-01T10:10:12"}}))
    caplog.set_level(logging.WARNING, logger="hermes_core.app")
    app, _ = _app(tmp_path)
    await app.start()
    try:
        assert app.unclean_start is False
        assert (await app.store.get_entry("agent:main:telegram:dm:12345")).session_id == "20250101_101010_abcdef12"
        assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.app"] == []
    finally:
        await app.stop()


async def test_start_failure_is_one_startup_error_and_releases_everything(tmp_path):
    (tmp_path / "sessions").write_text("x")
    (tmp_path / "state.db").mkdir()
    app, _ = _app(tmp_path)
    with pytest.raises(StartupError) as info:
        await app.start()
    assert str(info.value) == (f"{tmp_path / 'sessions'} exists and is not a directory (the folder of "
                               "sessions.json): move it away")
    # The home lock was released: a corrected home starts.
    (tmp_path / "sessions").unlink()
    fixed, _ = _app(tmp_path)
    await fixed.start()
    await fixed.stop()


async def test_a_start_that_fails_before_any_job_ran_keeps_the_clean_stop_marker(tmp_path):
    """docs/behaviour.md §6: the start consumes the marker of the last clean stop; when it then
    fails before any job ran (here a platform that cannot start), the marker is put back, so the
    next start (and `status`) does not report a crash that never happened."""
    app = await _one_turn(tmp_path)
    await app.stop()
    failing, adapter = _app(tmp_path)

    async def unreachable():
        raise ConnectionError("the platform cannot be reached")
    adapter.start = unreachable
    with pytest.raises(StartupError) as info:
        await failing.start()
    assert str(info.value) == "cannot start: the platform cannot be reached"
    assert (tmp_path / ".clean_shutdown").read_bytes() == b""
    assert await _next_start_is_unclean(tmp_path) is False


@pytest.mark.parametrize("name, suggestion", [("nosuch", ""), ("telegrm", "; did you mean telegram?")])
async def test_unknown_enabled_platform_is_a_startup_error(tmp_path, monkeypatch, name, suggestion):
    """It names the installed platform ids, and the close one for a typo (docs/configuration.md §2)."""
    from hermes_core.plugin_system import loader

    monkeypatch.setattr(loader, "entry_point_names", lambda group: ["discord", "local", "telegram"])
    app = GatewayApp(GatewayConfig(home=tmp_path, platforms={name: {"enabled": True}}),
                     agent=EchoAgent(), watcher=False)
    with pytest.raises(StartupError) as info:
        await app.start()
    assert str(info.value) == (f"platform {name!r} is enabled but its adapter cannot be loaded: "
                               "no adapter entry point is installed (installed platforms: discord, local, "
                               f"telegram{suggestion})")


async def test_a_gateway_given_its_adapters_warns_about_a_misspelt_platform_table(tmp_path, monkeypatch, caplog):
    """`chat` runs the terminal only and validates no other table, but a misspelt one is named
    with the warning `run` gives; a table the given adapters run is not warned about."""
    import io
    import logging

    from hermes_core.plugin_system import loader, settings

    for module in (loader, settings):
        monkeypatch.setattr(module, "entry_point_names", lambda group: ["discord", "local", "telegram"])
    config = GatewayConfig(home=tmp_path, platforms={"telegrm": {"enabled": True}, "telegram": {},
                                                     "fake": {"enabled": True}, "local": {"enabled": True}})
    terminals = [LocalAdapter(stdin=io.StringIO(""), stdout=io.StringIO()) for _ in range(2)]
    app = GatewayApp(config, adapters=dict(zip(("local", "fake"), terminals)),
                     agent=EchoAgent(), watcher=False)
    with caplog.at_level(logging.WARNING, logger="hermes_core.plugin_system.settings"):
        await app.start()
    try:
        assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.plugin_system.settings"] == [
            "[platforms.telegrm] is configured but no installed plugin provides it; ignored"
            " (installed platforms: discord, local, telegram; did you mean telegram?)"]
    finally:
        await app.stop()


def test_load_gateway_config_errors_are_startup_errors(tmp_path):
    from hermes_core.app import load_gateway_config

    (tmp_path / "hermes.toml").write_text("[core]\nmax_input_chars = -1\n")
    with pytest.raises(StartupError) as info:
        load_gateway_config(home=tmp_path)
    assert str(info.value).startswith("invalid config value for 'core.max_input_chars': ")
    assert str(info.value).endswith(f"(config file {tmp_path / 'hermes.toml'})")
    (tmp_path / "hermes.toml").write_text("[core]\nmax_input_chars = 7\n")
    assert load_gateway_config(home=tmp_path).core.max_input_chars == 7


async def test_app_creates_a_private_home_and_marker(tmp_path):
    """HERMES_HOME holds transcripts: a home the app creates is 0700, `.clean_shutdown` 0600."""
    home = tmp_path / "new-home"
    app = await _one_turn(home)
    await app.stop()
    assert oct(home.stat().st_mode & 0o777) == "0o700"
    assert oct((home / ".clean_shutdown").stat().st_mode & 0o777) == "0o600"


async def test_the_gateway_raises_the_young_gc_threshold_while_it_runs_and_restores_it(tmp_path):
    """docs/behaviour.md §12 "Garbage collection": `[core] gc_young_threshold` (default 200,000)
    at start, the older generations' thresholds kept, the previous ones back at stop."""
    import gc

    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        gc.collect()  # a young collection during the turn finds the middle generation empty
        app = await _one_turn(tmp_path)
        assert gc.get_threshold() == (200000, 10, 10)
        await app.stop()
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_the_young_gc_threshold_follows_the_objects_that_survive_young_collections():
    """docs/behaviour.md §12 "Garbage collection": after each young collection the threshold is
    twice the objects still alive that survived young collections (the middle generation), never
    below `gc_young_threshold`; when they are gone it falls back to it; `restore_gc` fixes the
    previous thresholds again."""
    import gc

    from hermes_core.ops.gc_tuning import restore_gc, tune_gc
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        gc.collect()  # nothing in the middle generation to start with
        assert tune_gc(200_000) == (700, 10, 10)
        live = [[n] for n in range(300_000)]  # 300,001 container objects that outlive a collection
        gc.collect(0)
        survivors = len(gc.get_objects(generation=1))
        assert survivors >= 300_001
        assert gc.get_threshold() == (2 * survivors, 10, 10)
        del live
        gc.collect()  # a full collection: the middle generation is empty, the threshold is kept
        assert gc.get_threshold() == (2 * survivors, 10, 10)
        gc.collect(0)  # a young collection that keeps (almost) nothing: back to the floor
        assert gc.get_threshold() == (200_000, 10, 10)
        # Nested (a benchmark tunes the process, then each pipeline it opens): the inner one
        # follows the heap from its own floor, and undoing it gives the outer one back.
        assert tune_gc(500_000) == (200_000, 10, 10)
        gc.collect(0)
        assert gc.get_threshold() == (500_000, 10, 10)
        restore_gc((200_000, 10, 10))
        gc.collect(0)
        assert gc.get_threshold() == (200_000, 10, 10)
        restore_gc((700, 10, 10))
        gc.collect(0)
        assert gc.get_threshold() == (700, 10, 10)  # no longer followed
    finally:
        gc.set_threshold(*before)


def test_gc_young_threshold_zero_keeps_the_interpreters_and_negative_is_refused():
    import gc

    from hermes_core.ops.gc_tuning import restore_gc, tune_gc
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        assert tune_gc(0) == (700, 10, 10)
        gc.collect(0)
        assert gc.get_threshold() == (700, 10, 10)  # fixed: not followed
        restore_gc((700, 10, 10))
        with pytest.raises(ValueError, match="core.gc_young_threshold must be >= 0; got -1"):
            tune_gc(-1)
        with pytest.raises(ValueError, match="gc_young_threshold"):
            GatewayConfig(core={"gc_young_threshold": -5})
    finally:
        gc.set_threshold(*before)
