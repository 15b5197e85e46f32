"""A partitioned flow on a real Spark standalone cluster (a master and two workers on loopback, from the
pyspark installation) whose workers' Python has neither freshview nor sqlglot (``worker_python``): freshview
ships itself with the job, shard steps run on the workers' executors, results equal PostgreSQL's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.spark_cluster import standalone_cluster
from tests.support.worker_python import worker_python

ROOT = Path(__file__).resolve().parents[2]


def test_a_partitioned_flow_ships_freshview_to_workers_without_it_and_equals_postgres(pg, tmp_path):
    worker = worker_python(tmp_path / "worker", shipped_only=("freshview", "sqlglot"))
    with standalone_cluster(workers=2, cores=1) as master:
        env = {**os.environ, "PYSPARK_PYTHON": worker, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
        result = subprocess.run([sys.executable, "-m", "tests.support.partitioned_cluster_check", master,
                                 str(tmp_path / "state"), pg], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "OK steps=4 executors=2 shipped=freshview-" in result.stdout, result.stdout + result.stderr[-3000:]
