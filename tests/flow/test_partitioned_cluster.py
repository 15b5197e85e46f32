"""A partitioned flow on a real Spark standalone cluster (a master and two workers on loopback, from the
pyspark installation): shard steps run on the workers' executors, results equal PostgreSQL's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.spark_cluster import standalone_cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_partitioned_flow_on_a_standalone_cluster_equals_postgres(pg, tmp_path):
    with standalone_cluster(workers=2, cores=1) as master:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
        result = subprocess.run([sys.executable, "-m", "tests.support.partitioned_cluster_check", master,
                                 str(tmp_path / "state"), pg], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "OK steps=4 executors=2" in result.stdout, result.stdout + result.stderr[-3000:]
