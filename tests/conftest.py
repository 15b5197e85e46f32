"""Shared fixtures: one Spark session, one throwaway PostgreSQL, flows and oracles.

Every fixture is lazy: a test that needs neither Spark nor PostgreSQL starts
neither (the Spark JVM costs ~7 s, PostgreSQL ~2 s, once per run).

* ``spark``     -- session-scoped ``freshview.runtime.spark.get_session()``.
* ``pg``        -- session-scoped DSN of a throwaway PostgreSQL server.
* ``mariadb``   -- session-scoped throwaway MariaDB server (pymysql connect args).
* ``mysql_database`` -- a fresh database on it (connect args with ``database``).
* ``database``  -- a fresh database on that server with the freshview schema.
* ``oracle``    -- a ``PgOracle`` in a fresh schema, dropped after the test.
* ``make_flow`` -- factory ``make_flow(**kwargs) -> IncrementalFlow`` on the
  shared session with a per-flow state dir under ``tmp_path``; every flow
  is closed at teardown.

Tests using ``spark`` or ``make_flow`` are marked ``spark`` automatically, so
``python3 -m pytest -m "not spark"`` runs the quick part of the suite.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.support.oracle import PgOracle
from tests.support.pg import postgres_dsn

_SPARK_FIXTURES = {"spark", "make_flow"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _SPARK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Imported here so collecting or running Spark-free tests never loads pyspark.
    from freshview.runtime.spark import get_session, stop_session

    session = get_session()
    yield session
    stop_session()


@pytest.fixture(scope="session")
def pg() -> Iterator[str]:
    with postgres_dsn() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def mariadb() -> Iterator[dict]:
    """Session-scoped throwaway MariaDB server: ``pymysql.connect`` keyword arguments (root)."""
    from tests.support.mariadb import mariadb_server

    with mariadb_server() as server:
        yield server


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    """Session-scoped throwaway NATS server with JetStream: its URL."""
    from tests.support.nats import nats_server

    with nats_server() as url:
        yield url


@pytest.fixture
def mysql_database(mariadb: dict) -> Iterator[dict]:
    """A fresh empty database on the session's MariaDB (dropped afterwards): connect args with it."""
    from tests.support.mariadb import fresh_mysql_database

    with fresh_mysql_database(mariadb) as args:
        yield args


@pytest.fixture
def database(pg: str) -> Iterator[str]:
    """A fresh database with the freshview schema installed (dropped afterwards, slots too)."""
    from tests.support.service import fresh_database

    with fresh_database(pg) as dsn:
        yield dsn


@pytest.fixture
def oracle(pg: str) -> Iterator[PgOracle]:
    ora = PgOracle(pg)
    try:
        yield ora
    finally:
        ora.close()


@pytest.fixture
def make_flow(spark: Any, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    from freshview import IncrementalFlow

    flows: list[Any] = []
    counter = itertools.count()

    def factory(**kwargs: Any) -> Any:
        kwargs.setdefault("state_dir", tmp_path / f"flow{next(counter)}")
        flow = IncrementalFlow(spark=spark, **kwargs)
        flows.append(flow)
        return flow

    yield factory
    errors = []
    for flow in reversed(flows):
        try:
            flow.close()
        except Exception as exc:  # close every flow even if one fails
            errors.append(exc)
    if errors:
        raise errors[0]
