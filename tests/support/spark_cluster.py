"""A Spark standalone cluster on loopback from the pyspark installation: a master and N workers."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark {what} did not start (port {port})")
            time.sleep(0.2)


@contextlib.contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory: str = "1g") -> Iterator[str]:
    """Start ``spark://127.0.0.1:<port>`` with ``workers`` workers; yields the master URL."""
    import pyspark

    home = Path(pyspark.__file__).parent
    spark_class = str(home / "bin" / "spark-class")
    work = Path(tempfile.mkdtemp(prefix="freshview-spark-"))
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_WORKER_DIR": str(work / "work"), "SPARK_LOG_DIR": str(work / "logs")}
    port = _free_port()
    procs: list[subprocess.Popen] = []
    log = open(work / "cluster.log", "w")
    try:
        master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(port), "--webui-port", str(_free_port())],
                                  env=env, stdout=log, stderr=subprocess.STDOUT)
        procs.append(master)
        _wait_port(port, master, "master")
        url = f"spark://127.0.0.1:{port}"
        for _ in range(workers):
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(cores),
                 "--memory", memory, "--webui-port", str(_free_port()), "--port", str(_free_port()), url],
                env=env, stdout=log, stderr=subprocess.STDOUT))
        time.sleep(3)  # the workers register with the master
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)
