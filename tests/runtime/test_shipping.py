"""runtime.shipping: freshview's code shipped to executors with the job, and one check that they can run it.

The rules (requirements, versions, the verdict on executors' reports, the zip cached by content) are pure and
tested in milliseconds; then, on the session's Spark, a worker Python that has neither freshview nor sqlglot
(``tests.support.worker_python``) runs a partitioned flow's shard steps from the shipped zip, and one that
lacks pyarrow gets the message saying what to install where.  (``tests/flow/test_partitioned_cluster.py``
does the same on a standalone cluster.)"""

from __future__ import annotations

import sys
import zipfile

import pyarrow as pa
import pytest

from freshview.errors import ExecutorEnvironmentError
from freshview.flow.partitioned import PartitionedIncrementalFlow
from freshview.runtime import shipping
from tests.support.worker_python import worker_python

GOOD = {"host": "node1", "python": "/usr/bin/python3", "modules": {
    "pyarrow": {"version": "16.1.0", "file": "/site/pyarrow/__init__.py"},
    "numpy": {"version": "1.26.4", "file": "/site/numpy/__init__.py"},
    "freshview.flow.partitioned": {"version": "0.1.0",
                                   "file": "/spark/userFiles/fv-1.zip/freshview/flow/partitioned.pyc"},
}}
MIN = {"pyarrow": "15", "numpy": "1.26"}


def judge(*reports):
    return shipping.verdict(reports, ["pyarrow", "numpy"], ["freshview.flow.partitioned"], MIN, "fv-1.zip")


def with_module(report, name, found, host=None):
    out = {**report, "modules": {**report["modules"], name: found}}
    return {**out, "host": host} if host else out


def test_minimum_versions_come_from_the_requirements():
    reqs = ["pyspark==4.3.0", "pyarrow>=15", "numpy >= 1.26", "pandas>=2.1", "duckdb>=1.1; extra == \"test\"",
            "psycopg[binary]>=3.2"]
    assert shipping.minimum_versions(reqs, ["pyarrow", "numpy", "psycopg", "duckdb"]) == \
        {"pyarrow": "15", "numpy": "1.26", "psycopg": "3.2"}
    assert shipping.version_tuple("15.0.2") == (15, 0, 2) and shipping.version_tuple("2.1.0rc1") == (2, 1, 0)
    assert shipping.version_tuple("1.26") > shipping.version_tuple("1.9")


def test_executors_with_everything_pass():
    assert judge(GOOD, with_module(GOOD, "pyarrow", {"version": "15.0.0", "file": "x"}, host="node2")) is None


def test_a_missing_compiled_dependency_says_what_to_install_where_once():
    lacking = with_module(GOOD, "pyarrow", {"error": "ModuleNotFoundError: No module named 'pyarrow'"})
    broken = with_module(lacking, "freshview.flow.partitioned", {"error": "ModuleNotFoundError: pyarrow"})
    message = judge(broken, {**broken, "host": "node2"}, GOOD)
    assert message == ("the executors' Python (/usr/bin/python3) lacks pyarrow>=15 (ModuleNotFoundError: No module "
                       "named 'pyarrow'): install it on every worker node (pip install 'pyarrow>=15') or set "
                       "spark.pyspark.python (PYSPARK_PYTHON) to a Python that has it [executors on node1, node2]")


def test_a_too_old_dependency_says_upgrade():
    message = judge(with_module(GOOD, "numpy", {"version": "1.24.3", "file": "x"}))
    assert "has numpy 1.24.3; freshview needs numpy>=1.26: upgrade it on every worker node " \
           "(pip install --upgrade 'numpy>=1.26')" in message


def test_the_shipped_code_must_import_and_come_from_the_zip():
    failed = judge(with_module(GOOD, "freshview.flow.partitioned", {"error": "SyntaxError: invalid syntax"}))
    assert "cannot import freshview.flow.partitioned, shipped with the job as fv-1.zip: SyntaxError" in failed
    shadowed = judge(with_module(GOOD, "freshview.flow.partitioned",
                                 {"version": "0.0.9", "file": "/opt/old/freshview/flow/partitioned.py"}))
    assert "imports freshview.flow.partitioned from /opt/old/freshview/flow/partitioned.py, not from fv-1.zip" \
        in shadowed


def test_the_zip_is_built_once_per_content_with_sources_and_bytecode(tmp_path):
    pkg = tmp_path / "src" / "demo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "data.txt").write_text("kept")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "junk.pyc").write_bytes(b"junk")
    first = shipping.build_zip({"demo": pkg}, tmp_path / "cache")
    assert shipping.build_zip({"demo": pkg}, tmp_path / "cache") == first
    with zipfile.ZipFile(first) as zf:
        assert sorted(zf.namelist()) == ["demo/__init__.py", "demo/__init__.pyc", "demo/data.txt",
                                         "demo/sub/__init__.py", "demo/sub/__init__.pyc"]
    (pkg / "__init__.py").write_text("X = 2\n")
    second = shipping.build_zip({"demo": pkg}, tmp_path / "cache")
    assert second != first and second.name.startswith("freshview-")
    sys.path.insert(0, str(second))
    try:
        import demo  # from the zip
        assert demo.X == 2 and str(second) in demo.__file__
    finally:
        sys.path.remove(str(second))
        sys.modules.pop("demo", None)


def test_a_package_with_extension_modules_is_not_pure(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    assert shipping.is_pure(tmp_path)
    (tmp_path / "_speedups.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    assert not shipping.is_pure(tmp_path)


@pytest.fixture
def workers_on(spark, monkeypatch, tmp_path):
    """Point the session's Python workers at a wrapper Python (``worker_python``); shipping checks again."""
    def use(**blocked) -> str:
        python = worker_python(tmp_path / "worker", **blocked)
        monkeypatch.setattr(spark.sparkContext, "pythonExec", python)
        monkeypatch.setattr(shipping, "_shipped", {})
        return python
    return use


def test_workers_without_freshview_run_shard_steps_from_the_shipped_zip(spark, workers_on, tmp_path):
    workers_on(shipped_only=("freshview", "sqlglot"))
    flow = PartitionedIncrementalFlow(partitions=2, partition_key={"orders": ["o_customer"]}, spark=spark,
                                      state_uri=tmp_path / "state")
    try:
        flow.register_source("orders", "o_id INT, o_customer INT, amount NUMERIC(10,2)", primary_key=["o_id"])
        flow.register_view("totals", "SELECT o_customer, SUM(amount) AS total FROM orders GROUP BY o_customer")
        flow.tick({"orders": pa.table({"o_id": [1, 2, 3], "o_customer": [1, 1, 2],
                                       "amount": pa.array([1.5, 2.25, 7], pa.float64()).cast(pa.decimal128(10, 2)),
                                       "_weight": [1, 1, 1]})})
        rows = sorted((r["o_customer"], str(r["total"])) for r in flow.snapshot("totals").to_pylist())
        assert rows == [(1, "3.75"), (2, "7.00")]
    finally:
        flow.close()
    assert shipping._shipped[spark.sparkContext.applicationId].startswith("freshview-")


def test_workers_without_pyarrow_are_refused_with_what_to_install_where(spark, workers_on, tmp_path):
    workers_on(missing=("pyarrow",))
    flow = PartitionedIncrementalFlow(partitions=2, partition_key={"orders": ["o_customer"]}, spark=spark,
                                      state_uri=tmp_path / "state")
    flow.register_source("orders", "o_id INT, o_customer INT", primary_key=["o_id"])
    with pytest.raises(ExecutorEnvironmentError) as refused:
        flow.register_view("n", "SELECT o_customer, COUNT(*) AS n FROM orders GROUP BY o_customer")
    assert f"the executors' Python ({sys.executable}) lacks pyarrow>=15 (ModuleNotFoundError: No module named " \
           "'pyarrow'): install it on every worker node (pip install 'pyarrow>=15') or set spark.pyspark.python" \
           in str(refused.value)
    assert flow.views == [] and shipping._shipped == {}  # nothing registered; checked again next time
    flow.close()


def test_an_incremental_flow_runs_no_python_on_executors(spark, workers_on):
    """Its Spark steps are SQL the JVM runs: workers lacking freshview and pyarrow do not matter."""
    from freshview import IncrementalFlow

    workers_on(missing=("freshview", "sqlglot", "pyarrow", "numpy"))
    flow = IncrementalFlow(spark=spark, execution="spark")
    flow.register_source("orders", "o_id INT, o_customer INT, amount INT", primary_key=["o_id"])
    flow.register_view("totals", "SELECT o_customer, SUM(amount) AS total FROM orders GROUP BY o_customer")
    flow.tick({"orders": pa.table({"o_id": [1, 2, 3], "o_customer": [1, 1, 2], "amount": [5, 6, 7],
                                   "_weight": [1, 1, 1]})})
    flow.tick({"orders": pa.table({"o_id": [2], "o_customer": [1], "amount": [6], "_weight": [-1]})})
    assert sorted(flow.snapshot("totals").to_pylist(), key=lambda r: r["o_customer"]) == \
        [{"o_customer": 1, "total": 5}, {"o_customer": 2, "total": 7}]
    flow.close()
