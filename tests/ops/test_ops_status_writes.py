"""docs/operations.md §2 and §4: status.json is rewritten every `[status] interval_s`; a disk
that cannot take it is one warning per run of failed writes, and one INFO line when a snapshot
is written again."""

from __future__ import annotations

import errno
import json
import logging
from types import SimpleNamespace

from hermes_core.ops import status


async def test_a_full_disk_under_status_json_is_one_warning_per_run_of_failures(tmp_path, caplog,
                                                                                 monkeypatch):
    full = {"on": True}
    real_write = status.write_atomic

    def write(path, text):
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device", f"{path.parent}/.status.json.x.tmp")
        real_write(path, text)

    async def collect(app, *, state):
        return {"state": state, "pid": 1, "home": str(app.home)}
    monkeypatch.setattr(status, "write_atomic", write)
    monkeypatch.setattr(status, "collect", collect)
    app = SimpleNamespace(home=tmp_path, metrics=SimpleNamespace(publish=lambda snapshot: None))
    publisher = status.StatusPublisher(app, interval_s=5.0)
    caplog.set_level(logging.INFO, logger="hermes_core.ops.status")

    for _ in range(12):  # a minute of refreshes on a full disk
        await publisher.publish("running")
    full["on"] = False
    await publisher.publish("running")
    await publisher.publish("running")
    full["on"] = True
    await publisher.publish("stopping")
    await publisher.publish("stopped")

    path = tmp_path / "status.json"
    warned = (f"status: {path} cannot be written (No space left on device): 'hermes-gateway status' "
              "shows the last snapshot written until it can be")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", warned),
        ("INFO", f"status: {path} written again after 12 failed attempt(s)"),
        ("WARNING", warned),
    ]
    assert json.loads(path.read_text())["state"] == "running"
