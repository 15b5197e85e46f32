"""The CLI prints only freshview's own lines; library and JVM noise goes to the log file it names."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
# freshview's own log lines (rich: optional time, level column, message) may say WARNING
OWN = re.compile(r"^\s*(\[[^\]]*\]\s+)?(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s{2,}")
NOISE = re.compile(r"WARN|Warning|log4j|py4j|SLF4J|Using Spark's|Setting default log level|setLogLevel|incubator",
                   re.IGNORECASE)


def test_run_prints_no_library_noise(database, tmp_path):
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, g text)")
        conn.execute("INSERT INTO t SELECT i, 'g' || (i % 3) FROM generate_series(1, 50) i")
    state = tmp_path / "state"
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               FRESHVIEW_DSN=database, PYTHONWARNINGS="default", COLUMNS="250")  # every warning shown, unless routed away
    env.pop("XDG_RUNTIME_DIR", None)  # platformdirs warns without it: that warning must go to the log too
    proc = subprocess.Popen([sys.executable, "-m", "freshview", "run", "--state-dir", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    failure = None
    try:
        with psycopg.connect(database, autocommit=True) as conn:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                row = conn.execute("SELECT status FROM freshview.progress").fetchone()
                if row and row[0] == "running":
                    break
                time.sleep(0.2)
            conn.execute("CALL freshview.create_view('public.counts', 'SELECT g, COUNT(*) AS n FROM t GROUP BY g', "
                         "600)")  # Spark runs: its banner, log4j and pandas warnings would show now
            conn.execute("INSERT INTO t VALUES (100, 'new')")
            deadline = time.monotonic() + 300
            while conn.execute("SELECT count(*) FROM counts WHERE g = 'new'").fetchone()[0] == 0:
                if time.monotonic() > deadline:
                    failure = "the view did not follow the change"
                    break
                time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    log = state / "freshview.log"
    assert failure is None, f"{failure}\nstdout:\n{stdout}\nstderr:\n{stderr}\nlog:\n{log.read_text()[-3000:]}"
    assert f"logs: {log}" in stderr.replace("\n", "")
    noisy = [line for line in (stdout + stderr).splitlines() if NOISE.search(line) and not OWN.match(line)]
    assert not noisy, "library noise on the terminal:\n" + "\n".join(noisy)
    assert "view public.counts created" in stderr  # freshview's own lines still show
    assert log.exists()
