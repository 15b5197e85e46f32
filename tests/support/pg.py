"""A throwaway PostgreSQL server for the test suite.

The tests compare freshview's views against PostgreSQL running the same SQL,
so every test run needs a PostgreSQL it fully controls: a fresh cluster in a
temporary directory, listening on 127.0.0.1 on a free port, configured for
logical replication (later connector tests need slots and WAL senders) and
made fast and disposable (``fsync=off``).  We never touch a PostgreSQL that
happens to run on the machine (port 5432): CI machines may not have one, and
tests must not depend on or damage a developer's database.

PostgreSQL refuses to run as root.  When the tests run as root (containers,
CI) the cluster is created and run as the ``postgres`` OS user through
``runuser``, in a directory that user owns.

Set ``FRESHVIEW_TEST_PG_DSN`` to use an existing server instead (opt-in only;
the server must allow creating schemas, and logical replication for the
connector tests).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

_REQUIRED = ("initdb", "pg_ctl", "postgres")

# Settings appended to postgresql.conf.  Durability is pointless for a
# throwaway cluster; logical replication settings are needed by CDC tests.
_SETTINGS = {
    "fsync": "off",
    "full_page_writes": "off",
    "wal_level": "logical",
    "max_replication_slots": "10",
    "max_wal_senders": "10",
    "max_connections": "50",
    # Small shared memory: containers often have a tiny /dev/shm.
    "shared_buffers": "32MB",
    "dynamic_shared_memory_type": "mmap",
    # Deterministic rendering and time zone, matching Spark's UTC session.
    "timezone": "'UTC'",
    "datestyle": "'ISO, YMD'",
    "log_min_messages": "warning",
}


class PostgresError(RuntimeError):
    """The throwaway server could not be created or started."""


def find_pg_bindir() -> Path:
    """Locate the directory holding initdb/pg_ctl/postgres.

    Order: ``$PG_BINDIR``, ``pg_config --bindir``, the newest
    ``/usr/lib/postgresql/*/bin`` (Debian keeps server binaries off PATH),
    then PATH.
    """
    candidates: list[Path] = []
    if os.environ.get("PG_BINDIR"):
        candidates.append(Path(os.environ["PG_BINDIR"]))
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out:
                candidates.append(Path(out))

    def _version(path: str) -> float:
        try:
            return float(Path(path).parent.name)
        except ValueError:
            return 0.0

    for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True):
        candidates.append(Path(path))
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    for cand in candidates:
        if all((cand / exe).exists() for exe in _REQUIRED):
            return cand
    raise PostgresError(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; looked in "
        + ", ".join(str(c) for c in candidates or ["PATH"])
        + ". Install PostgreSQL (e.g. apt-get install postgresql-15) or set PG_BINDIR."
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One disposable PostgreSQL cluster.  Use :meth:`start` / :meth:`stop` or ``with``."""

    def __init__(self, bindir: Path | None = None, start_timeout: float = 60.0) -> None:
        self.bindir = bindir or find_pg_bindir()
        self.start_timeout = start_timeout
        self.port: int | None = None
        self.root: Path | None = None
        self._run_as: pwd.struct_passwd | None = None
        self._running = False

    # -- paths -----------------------------------------------------------
    @property
    def datadir(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def sockdir(self) -> Path:
        assert self.root is not None
        return self.root / "sock"

    @property
    def logfile(self) -> Path:
        assert self.root is not None
        return self.root / "server.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> str:
        """Create the cluster, start it and wait until it accepts connections."""
        self._prepare_root()
        self._run(
            [str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--locale=C", "--lc-ctype=C.UTF-8", "--no-instructions"],
            what="initdb",
        )
        last_error = ""
        # The free port can be taken between our probe and the server's bind;
        # retry a few times with a new port instead of failing the run.
        for _attempt in range(3):
            self.port = free_port()
            self._write_conf()
            proc = self._run(
                [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.logfile),
                 "-w", "-t", str(int(self.start_timeout)), "start"],
                what="pg_ctl start", check=False,
            )
            if proc.returncode == 0 and self._wait_ready():
                self._running = True
                atexit.register(self.stop)
                return self.dsn
            last_error = proc.stdout + proc.stderr
            self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate",
                       "stop"], what="pg_ctl stop", check=False)
        log = self.read_log()
        self.stop()
        raise PostgresError(
            f"PostgreSQL did not start (binaries: {self.bindir}).\n"
            f"pg_ctl output:\n{last_error}\nserver log:\n{log}"
        )

    def stop(self) -> None:
        """Stop immediately (no checkpoint needed) and delete the cluster; idempotent."""
        if self.root is None:
            return
        if self._running and self.datadir.exists():
            self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate",
                       "-w", "stop"], what="pg_ctl stop", check=False)
        self._running = False
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def read_log(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-20000:]
        except (OSError, AssertionError):
            return "(no server log)"

    def __enter__(self) -> "PostgresServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers -------------------------------------------------------------
    def _prepare_root(self) -> None:
        if os.geteuid() == 0:
            try:
                self._run_as = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresError(
                    "tests run as root, PostgreSQL refuses to run as root, and there is no "
                    "'postgres' OS user to run it as (create one: useradd -r postgres)"
                ) from None
            if shutil.which("runuser") is None:
                raise PostgresError("tests run as root but 'runuser' is missing (util-linux)")
        # /tmp is used when running as root: $TMPDIR may live under /root,
        # which the postgres user cannot traverse.
        base = "/tmp" if self._run_as is not None else None
        self.root = Path(tempfile.mkdtemp(prefix="freshview-pg-", dir=base))
        self.sockdir.mkdir()
        if self._run_as is not None:
            for path in (self.root, self.sockdir):
                os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)

    def _write_conf(self) -> None:
        settings = dict(_SETTINGS)
        settings["listen_addresses"] = "'127.0.0.1'"
        settings["port"] = str(self.port)
        settings["unix_socket_directories"] = f"'{self.sockdir}'"
        # postgresql.auto.conf wins over postgresql.conf and is rewritten on
        # each attempt, so a retry with a new port replaces the old one.
        text = "".join(f"{k} = {v}\n" for k, v in settings.items())
        auto = self.datadir / "postgresql.auto.conf"
        auto.write_text("# written by tests/support/pg.py\n" + text)
        if self._run_as is not None:
            os.chown(auto, self._run_as.pw_uid, self._run_as.pw_gid)

    def _run(self, argv: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess:
        if self._run_as is not None:
            argv = ["runuser", "-u", self._run_as.pw_name, "--", *argv]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        # The cwd must be readable by the postgres user (the repo may not be).
        proc = subprocess.run(argv, cwd=str(self.root), env=env, capture_output=True, text=True,
                              timeout=self.start_timeout + 30)
        if check and proc.returncode != 0:
            log = self.read_log()
            raise PostgresError(
                f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}\nserver log:\n{log}"
            )
        return proc

    def _wait_ready(self) -> bool:
        import psycopg

        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.dsn, connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                return True
            except psycopg.OperationalError:
                time.sleep(0.1)
        return False


@contextlib.contextmanager
def postgres_dsn() -> Iterator[str]:
    """Yield the DSN of a fresh throwaway server (or ``$FRESHVIEW_TEST_PG_DSN``)."""
    external = os.environ.get("FRESHVIEW_TEST_PG_DSN")
    if external:
        yield external
        return
    server = PostgresServer()
    server.start()
    try:
        yield server.dsn
    finally:
        server.stop()
