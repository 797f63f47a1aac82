"""A real PostgreSQL server (the Debian package's initdb and pg_ctl) in a temporary folder on a free
loopback port, for the run store's tests.

The Debian package puts its binaries in /usr/lib/postgresql/<version>/bin, which is not on PATH;
they are looked for there. PostgreSQL refuses to run as root: under root the server runs as the
`postgres` user (created by the package) through `runuser`. Clients connect over TCP on 127.0.0.1
as the superuser `postgres`, trusted (a throwaway cluster).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg

INSTALL_HINT = "Debian package postgresql; .ci/run installs it"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_binaries() -> Path | None:
    """The folder of initdb and pg_ctl: on PATH, else the newest /usr/lib/postgresql/*/bin."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(os.path.realpath(on_path)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit()
                   else 0)
    return Path(found[-1]).parent if found else None


class PostgresServer:
    """`start()` creates the cluster and starts it (returning why not, or None when it runs);
    `stop()` stops it fast; `restart()` stops and starts it again (clients lose their
    connections); `create_database()` makes an empty database and returns its
    postgresql:// URL."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="runs-pg-"))
        self.data = self.directory / "data"
        self.port = _free_port()
        self.bin: Path | None = None
        self._prefix: list[str] = []

    def start(self) -> str | None:
        self.bin = find_binaries()
        if self.bin is None:
            return f"PostgreSQL's initdb is not installed ({INSTALL_HINT})"
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                return "running as root and runuser is missing (PostgreSQL refuses root)"
            try:
                shutil.chown(self.directory, user="postgres", group="postgres")
            except (LookupError, PermissionError) as error:
                return f"running as root and no postgres user to run the server as ({error})"
            self._prefix = ["runuser", "-u", "postgres", "--"]
        initdb = self._run(["initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                            "-E", "UTF8", "--no-sync", "--no-instructions"])
        if initdb.returncode != 0:
            return f"initdb failed: {initdb.stderr.strip()[-500:]}"
        return self._start()

    def _start(self) -> str | None:
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.directory} "
                   "-c fsync=off -c max_connections=100")
        started = self._run(["pg_ctl", "-D", str(self.data), "-l", str(self.directory / "log"),
                             "-o", options, "-w", "-t", "60", "start"])
        if started.returncode != 0:
            log = (self.directory / "log").read_text(errors="replace")[-800:]
            return f"pg_ctl start failed: {started.stderr.strip()[-300:]} {log}"
        return None

    def _run(self, command: list[str]) -> subprocess.CompletedProcess:
        assert self.bin is not None
        full = [*self._prefix, str(self.bin / command[0]), *command[1:]]
        return subprocess.run(full, capture_output=True, text=True, timeout=120,
                              cwd=self.directory, check=False)

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def create_database(self) -> str:
        name = "runs_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.admin_url, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.bin is not None and (self.data / "postmaster.pid").exists():
            self._run(["pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def restart(self) -> None:
        self.stop()
        reason = self._start()
        if reason is not None:
            raise RuntimeError(reason)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
