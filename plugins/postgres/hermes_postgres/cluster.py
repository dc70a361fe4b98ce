"""A throw-away PostgreSQL cluster on 127.0.0.1 for tests and benchmarks (docs/architecture.md §8).

Uses the server binaries of the machine (Debian's `postgresql` package: `/usr/lib/postgresql/<v>/bin`,
else `pg_config --bindir`). PostgreSQL refuses to run as root, so under root `initdb` and
`pg_ctl` run as the `postgres` user (`runuser`) on a folder it owns. The cluster trusts local
connections on a free port and is removed by `stop()`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import psycopg

REQUIRE_ENV = "HERMES_REQUIRE_PG"


class ClusterUnavailable(RuntimeError):
    """No PostgreSQL server can be started here; the text says why (binaries, user, start)."""


def server_bindir() -> Path:
    """The folder of `initdb` / `pg_ctl`. Raises ClusterUnavailable when none is installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    if found:
        return found[-1].parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        bindir = Path(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout.strip())
        if (bindir / "initdb").exists():
            return bindir
    if shutil.which("initdb"):
        return Path(shutil.which("initdb")).parent
    raise ClusterUnavailable("no PostgreSQL server binaries (install Debian's postgresql package: "
                             "apt-get install -y postgresql)")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThrowawayCluster:
    """initdb + pg_ctl into `root`, listening on 127.0.0.1:`port`.

    Args:
        root: a folder to create for the data directory, socket and log (its parent must be
            searchable by the `postgres` user when running as root).
        durable: keep `fsync = on` (benchmarks); tests turn it off for speed.
    """

    def __init__(self, root: Path, *, durable: bool = False) -> None:
        self.root = Path(root)
        self.data = self.root / "data"
        self.port = free_port()
        self.durable = durable
        self.bindir = server_bindir()
        self._user = None
        if os.geteuid() == 0:
            try:
                self._user = pwd.getpwnam("postgres")
            except KeyError:
                raise ClusterUnavailable("running as root and there is no 'postgres' user to run the server") from None

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self._user is not None:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise ClusterUnavailable(f"{args[0]} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> "ThrowawayCluster":
        """Create and start the cluster. Raises ClusterUnavailable with the server's reason."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C",
                  "--no-sync")
        options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c max_connections=300"
        if not self.durable:
            options += " -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"), "-w",
                  "-t", "60", "start")
        return self

    def stop(self) -> None:
        """Stop the server immediately and delete its files."""
        if self.data.exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            except ClusterUnavailable:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def dsn(self, dbname: str = "postgres") -> str:
        """The libpq DSN of database `dbname` (user postgres, trust auth)."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} connect_timeout=10"

    def create_database(self) -> str:
        """A new empty database; returns its DSN."""
        name = f"hermes_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def drop_database(self, dsn: str) -> None:
        """Drop the database of `dsn` (its connections are ended first)."""
        name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
