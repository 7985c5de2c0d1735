"""A throwaway PostgreSQL server for the tests: ``initdb`` and ``pg_ctl`` in a temporary
folder, on a free port of 127.0.0.1, as an unprivileged user when the tests run as root
(PostgreSQL refuses to run as root). Password authentication over TCP, as a real server has.

Tests that need it skip when no server binary is found, unless ``RAGJURY_REQUIRE_POSTGRES``
is set (CI sets it): then they fail.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

USER, PASSWORD = "ragjury", "s3cret-pw"
_names = itertools.count()


def binaries() -> Path | None:
    """The folder of ``pg_ctl`` and ``initdb``: on PATH, or Debian's versioned folder."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    folders = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    return Path(folders[-1]) if folders else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """A running cluster; ``database()`` makes a fresh database and returns its URL."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.folder = Path(tempfile.mkdtemp(prefix="ragjury-pg-"))
        self.data = self.folder / "data"
        self.port = _free_port()
        self.uid: int | None = None
        if os.geteuid() == 0:  # run the server as an ordinary user
            account = pwd.getpwnam("postgres") if _has_user("postgres") else pwd.getpwnam("nobody")
            self.uid = account.pw_uid
            os.chown(self.folder, account.pw_uid, account.pw_gid)
            self.folder.chmod(0o700)
        password_file = self.folder / "pw"
        password_file.write_text(PASSWORD)
        if self.uid is not None:
            os.chown(password_file, self.uid, -1)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={password_file}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--no-sync",
        )
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        result = subprocess.run(
            [str(self.bin / tool), *args],
            capture_output=True,
            text=True,
            user=self.uid,
            cwd=self.folder,
            check=False,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stdout}\n{result.stderr}")

    @property
    def counts_statements(self) -> bool:
        """Whether the server loads ``pg_stat_statements`` (its statements can be counted)."""
        return (self.bin.parent / "lib" / "pg_stat_statements.so").exists()

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=200"
        )
        if self.counts_statements:
            options += " -c shared_preload_libraries=pg_stat_statements"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.folder / "log"),
            "-o",
            options,
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def url(self, database: str = "postgres", *, password: bool = True) -> str:
        secret = f":{PASSWORD}" if password else ""
        return f"postgresql://{USER}{secret}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        name = f"t{os.getpid()}_{next(_names)}"
        self._run("createdb", "-h", str(self.folder), "-p", str(self.port), "-U", USER, name)
        return self.url(name)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def start_or_skip() -> PostgresServer:
    bin_dir = binaries()
    if bin_dir is None:
        if os.environ.get("RAGJURY_REQUIRE_POSTGRES"):
            pytest.fail(
                "RAGJURY_REQUIRE_POSTGRES is set but no PostgreSQL server (pg_ctl, initdb) was "
                "found; install Debian's postgresql package"
            )
        pytest.skip("no PostgreSQL server binaries (set RAGJURY_REQUIRE_POSTGRES to require)")
    return PostgresServer(bin_dir)
