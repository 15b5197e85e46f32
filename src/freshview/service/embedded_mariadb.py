"""A disposable local MariaDB server, for the tests and ``freshview demo --mysql``.

The machine's MariaDB binaries (``mariadb-install-db`` and ``mariadbd``, as
Debian's ``mariadb-server`` installs them, or ``$MARIADB_BINDIR``) create a
fresh data directory in a temporary folder, and ``mariadbd`` runs on it,
listening on 127.0.0.1 on a free port with exactly the settings freshview
needs: the binary log in ROW format with full row images and full row
metadata (column names travel in the binlog), GTIDs, and a server id.  The
server never touches a MariaDB that already runs on the machine.

``root`` has no password and can connect over TCP from 127.0.0.1 only.  When
the process runs as root, ``mariadbd`` runs as the ``mysql`` OS user (it
refuses to run as root otherwise) in a directory that user owns.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from freshview.service.embedded import free_port

#: What freshview's binlog reader needs, plus what makes a throwaway server fast.
SETTINGS: dict[str, str] = {
    "server_id": "1",
    "log_bin": "binlog",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
    "expire_logs_days": "1",
    "innodb_flush_log_at_trx_commit": "2",
    "sync_binlog": "0",
    "innodb_buffer_pool_size": "128M",
    "innodb_log_file_size": "64M",
    "max_connections": "200",
    "character_set_server": "utf8mb4",
    "skip_name_resolve": "1",
}

_CANDIDATE_BINDIRS = ("/usr/sbin", "/usr/bin", "/usr/local/mysql/bin", "/usr/local/bin")


class MariaDBError(RuntimeError):
    """The local MariaDB server could not be created or started."""


def find_mariadb_binaries() -> tuple[Path, Path]:
    """``(mariadb-install-db, mariadbd)``: from ``$MARIADB_BINDIR``, PATH or the usual places."""
    explicit = os.environ.get("MARIADB_BINDIR")
    dirs = [explicit] if explicit else list(_CANDIDATE_BINDIRS)

    def find(*names: str) -> Path | None:
        for name in names:
            found = None if explicit else shutil.which(name)
            if found:
                return Path(found)
            for d in dirs:
                path = Path(d) / name
                if path.is_file() and os.access(path, os.X_OK):
                    return path
        return None

    install = find("mariadb-install-db", "mysql_install_db")
    server = find("mariadbd", "mysqld")
    if install is None or server is None:
        raise MariaDBError(
            "no MariaDB server binaries found (mariadb-install-db and mariadbd, looked in PATH and "
            + ", ".join(dirs) + "). Install MariaDB (apt-get install mariadb-server) or set MARIADB_BINDIR."
        )
    return install, server


class MariaDBServer:
    """One disposable MariaDB server.  Use :meth:`start` / :meth:`stop` or ``with``."""

    def __init__(self, settings: dict[str, str] | None = None, start_timeout: float = 60.0) -> None:
        self.install_db, self.mariadbd = find_mariadb_binaries()
        self.settings = {**SETTINGS, **(settings or {})}
        self.start_timeout = start_timeout
        self.port: int | None = None
        self.root: Path | None = None
        self._proc: subprocess.Popen | None = None
        self._run_as: pwd.struct_passwd | None = None

    # -- paths -------------------------------------------------------------
    @property
    def datadir(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def socket(self) -> Path:
        assert self.root is not None
        return self.root / "mariadb.sock"

    @property
    def logfile(self) -> Path:
        assert self.root is not None
        return self.root / "server.log"

    @property
    def dsn(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/"

    def connect_args(self, database: str | None = None) -> dict:
        """Keyword arguments for ``pymysql.connect`` (root over TCP)."""
        args = {"host": "127.0.0.1", "port": self.port, "user": "root", "password": ""}
        if database:
            args["database"] = database
        return args

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> str:
        """Create the data directory, start ``mariadbd`` and wait until it accepts connections."""
        self._prepare_root()
        self._run([str(self.install_db), f"--datadir={self.datadir}", "--auth-root-authentication-method=normal",
                   "--skip-test-db", "--no-defaults", *self._user_args()], what="mariadb-install-db")
        last = ""
        # The free port can be taken between our probe and the server's bind: retry with a new one.
        for _attempt in range(3):
            self.port = free_port()
            conf = self._write_conf()
            argv = [str(self.mariadbd), f"--defaults-file={conf}", *self._user_args()]
            self._proc = subprocess.Popen(argv, cwd=str(self.root), stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
            if self._wait_ready():
                atexit.register(self.stop)
                return self.dsn
            last = self.read_log()
            self._kill()
        self.stop()
        raise MariaDBError(f"MariaDB did not start ({self.mariadbd}).\nserver log:\n{last}")

    def stop(self) -> None:
        """Kill the server (no clean shutdown needed) and delete its files; idempotent."""
        self._kill()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def crash(self) -> None:
        """Kill the server (SIGKILL: no shutdown, InnoDB recovers at the next start), keeping its files."""
        self._kill()

    def shutdown(self) -> None:
        """Stop the server cleanly (SIGTERM: a normal shutdown), keeping its files."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=self.start_timeout)
        self._proc = None

    def resume(self) -> None:
        """Start the stopped server again on its port and wait until it accepts connections."""
        conf = self.root / "my.cnf"
        self._proc = subprocess.Popen([str(self.mariadbd), f"--defaults-file={conf}", *self._user_args()],
                                      cwd=str(self.root), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True)
        if not self._wait_ready():
            raise MariaDBError(f"MariaDB did not start again.\nserver log:\n{self.read_log()}")

    def read_log(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-20000:]
        except (OSError, AssertionError):
            return "(no server log)"

    def __enter__(self) -> "MariaDBServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers ---------------------------------------------------------------
    def _user_args(self) -> list[str]:
        return [f"--user={self._run_as.pw_name}"] if self._run_as is not None else []

    def _prepare_root(self) -> None:
        if os.geteuid() == 0:
            try:
                self._run_as = pwd.getpwnam("mysql")
            except KeyError:
                raise MariaDBError(
                    "running as root, mariadbd refuses to run as root, and there is no 'mysql' OS user "
                    "to run it as (create one: useradd -r mysql)"
                ) from None
        base = "/tmp" if self._run_as is not None else None
        self.root = Path(tempfile.mkdtemp(prefix="freshview-mariadb-", dir=base))
        self.datadir.mkdir()
        if self._run_as is not None:
            for path in (self.root, self.datadir):
                os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)

    def _write_conf(self) -> Path:
        settings = dict(self.settings)
        settings.update({
            "datadir": str(self.datadir), "port": str(self.port), "bind_address": "127.0.0.1",
            "socket": str(self.socket), "pid_file": str(self.root / "mariadbd.pid"),
            "log_error": str(self.logfile), "log_bin": str(self.datadir / settings["log_bin"]),
        })
        conf = self.root / "my.cnf"
        conf.write_text("[mariadbd]\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))
        return conf

    def _run(self, argv: list[str], what: str) -> None:
        proc = subprocess.run(argv, cwd=str(self.root), capture_output=True, text=True,
                              timeout=self.start_timeout + 60)
        if proc.returncode != 0:
            raise MariaDBError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n"
                               f"stdout:\n{proc.stdout[-5000:]}\nstderr:\n{proc.stderr[-5000:]}")

    def _wait_ready(self) -> bool:
        import pymysql

        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                return False
            try:
                conn = pymysql.connect(connect_timeout=2, **self.connect_args())
                conn.close()
                return True
            except pymysql.err.OperationalError:
                time.sleep(0.1)
        return False

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self._proc = None
