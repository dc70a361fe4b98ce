"""A real `hermes-gateway run` process for crash tests (docs/plugins.md §7): start it on a home
with an environment of its own, kill it for real, and watch its `state.db` from outside.

Crash tests must crash for real: the gateway runs as a subprocess, is killed with SIGKILL and is
started again on the same home. What they share is here, so each plugin's test says only what
its platform does.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from pathlib import Path
from typing import IO

GATEWAY_SCRIPT = Path(sys.executable).with_name("hermes-gateway")
"""The `hermes-gateway` console script of the environment running the tests."""


def gateway_env(home: Path | str | None, **extra: str) -> dict[str, str]:
    """The caller's environment without any `HERMES_*` variable (in any case), so the gateway
    loads the installed plugins through their entry points and the home's own config, then
    `HERMES_HOME` = `home` (left unset when None) and `extra` (variable name → value, e.g. a
    token: `HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN="…"`)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
    if home is not None:
        env["HERMES_HOME"] = str(home)
    env.update(extra)
    return env


async def start_gateway(home: Path, *, stdout: int | IO[bytes] | None = asyncio.subprocess.DEVNULL,
                        stderr: int | IO[bytes] | None = asyncio.subprocess.PIPE, **extra: str
                        ) -> asyncio.subprocess.Process:
    """Start `hermes-gateway run` on `home` with `gateway_env(home, **extra)`.

    Args:
        home: the `HERMES_HOME` folder (its `hermes.toml` is the config).
        stdout, stderr: where the process's streams go (asyncio.subprocess constants, a file
            descriptor or an open binary file); stderr is piped by default so a test can show it
            when it fails.
        extra: environment variables added for this process.
    Returns:
        The running process; the caller kills it (`send_signal(signal.SIGKILL)`) or stops it.
    """
    return await asyncio.create_subprocess_exec(str(GATEWAY_SCRIPT), "run", env=gateway_env(home, **extra),
                                                stdin=asyncio.subprocess.DEVNULL, stdout=stdout, stderr=stderr)


def count_delivered(home: Path) -> int:
    """Delivery obligations recorded 'delivered' in `home`'s state.db (docs/behaviour.md §6),
    read through a read-only connection of its own; 0 while the file or its schema does not
    exist yet (the gateway is still starting)."""
    path = home / "state.db"
    if not path.exists():
        return 0
    conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute("SELECT COUNT(*) FROM delivery_obligations WHERE state = 'delivered'").fetchone()[0]
    except sqlite3.OperationalError:  # the schema is still being created
        return 0
    finally:
        conn.close()


async def wait_for_delivered(home: Path, count: int, timeout_s: float = 30.0) -> None:
    """Wait until at least `count` delivery obligations of `home` are 'delivered' (polled every
    50 ms). A crash test kills the gateway only then when it is about deduplication: a kill while
    a send is unconfirmed rightly re-sends it, labelled (docs/behaviour.md §6).

    Raises:
        AssertionError: not reached within `timeout_s` seconds (names the count).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while count_delivered(home) < count:
        if loop.time() > deadline:
            raise AssertionError(f"{count} deliveries were never recorded within {timeout_s:g} s")
        await asyncio.sleep(0.05)
