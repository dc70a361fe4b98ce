"""`hermes-gateway status [--json]`: is a gateway running on this home, and how is it
(docs/operations.md §2). Reads `status.json` and probes the home lock; never opens `state.db`
and never disturbs the running gateway.

Exit code 0 when a gateway holds the home, 3 when none does (the LSB code for "not running",
as `systemctl status` uses it).
"""

from __future__ import annotations

from pathlib import Path

import typer

from ..ops.status import read_status
from ..settings import default_home
from .common import CliError, home_not_a_directory, load_cli_config, warn
from .output import console, human_time, print_fields, print_json, print_table

EXIT_NOT_RUNNING = 3
UNCLEAN_STOP = "it did not stop cleanly: the next start recovers any turns and replies it left unfinished"
# On a server store the start runs no recovery: a replica takes the sessions over once their
# leases run out, with their recovery (docs/architecture.md §7) — maybe another replica, sooner.
UNCLEAN_STOP_REPLICA = ("it did not stop cleanly: whichever replica of its store takes its sessions over (once "
                        "their leases run out) recovers any turns and replies it left unfinished")


def human_duration(seconds: float | None) -> str:
    """`93784` → `1d 2h 3m`; under a minute → `42s`."""
    if seconds is None:
        return ""
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    return " ".join(f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n) or "0m"


def _home() -> tuple[Path, bool]:
    """The home to report on: the config's, and whether its store is shared by replicas
    (`[store] backend` other than sqlite). A config that no longer loads (edited while a gateway
    runs on the one it loaded at start) must not hide that gateway from the operator, so its
    error becomes a warning and the default home (`$HERMES_HOME`, else `~/.hermes`) is read
    (docs/operations.md §2)."""
    try:
        config = load_cli_config()
        return config.home, not config.store.builtin
    except CliError as exc:
        home = default_home()
        warn(f"{exc}; showing the status of {home}")
        return home, False


def status_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """Say whether a gateway holds this home, and how it is.

    Pid, uptime, platforms and their health, busy sessions, queue depth, ledger backlog. Exit code
    3 when none runs."""
    home, shared_store = _home()
    report = read_status(home)
    if as_json:
        print_json(report)
    elif not report["running"]:
        last = report.get("last") or {}
        when = human_time(last.get("updated_at"))
        seen = (f" (last seen {when}, pid {last['pid']})" if when else f" (pid {last['pid']})") if last else ""
        seen = home_not_a_directory(home) or seen  # say why none can, not only that none does
        console().print(f"no gateway is running on {home}{seen}", markup=False, soft_wrap=True)
        if report.get("clean_stop") is False:  # a kill or a crash: say so (docs/operations.md §2)
            console().print(UNCLEAN_STOP_REPLICA if shared_store else UNCLEAN_STOP, markup=False, soft_wrap=True)
    elif report.get("stale"):
        console().print(f"a gateway is running on {home} (pid {report['pid'] or 'unknown'}) but has not "
                        "published a readable status yet", markup=False, soft_wrap=True)
    else:
        if report.get("replica_ledger_backlog") is None:
            backlog = [("ledger backlog", report.get("ledger_backlog"))]
        else:  # a server store: one ledger for every replica (docs/operations.md §2)
            backlog = [("ledger backlog (this replica)", report["replica_ledger_backlog"]),
                       ("ledger backlog (whole store)", report.get("ledger_backlog"))]
        print_fields([
            ("gateway", f"{'stopping' if report.get('state') == 'stopping' else 'running'} on {report['home']}"),
            ("pid", report["pid"]),
            ("started", human_time(report.get("started_at"))),
            ("uptime", human_duration(report.get("uptime_s"))), ("ready", report.get("ready")),
            ("busy sessions", report.get("busy_sessions")), ("queue depth", report.get("queue_depth")),
            *backlog, ("store degraded", report.get("store_degraded")),
            ("updated", human_time(report.get("updated_at")))])
        rows = [{"platform": name, "healthy": health.get("ok"),
                 "detail": ", ".join(f"{k}={v}" for k, v in sorted(health.items()) if k != "ok")}
                for name, health in (report.get("platforms") or {}).items()]
        print_table(rows, ["platform", "healthy", "detail"])
    if not report["running"]:
        raise typer.Exit(EXIT_NOT_RUNNING)
