"""``freshview demo`` end to end on a small shop: the views the demo creates equal the database's own answer
after its workload, on PostgreSQL (the embedded server) and on MariaDB (``--mysql``)."""

from __future__ import annotations

import collections
import decimal
import time

import pytest

from freshview.cli.demo import VIEWS, _rows, run_demo


def _norm(value):
    if isinstance(value, decimal.Decimal):
        return str(value.normalize())
    if isinstance(value, str):
        return value.lower()  # (MariaDB's case-insensitive groups may show any spelling)
    return value


def result(conn, name: str) -> collections.Counter:
    cur = conn.cursor()
    cur.execute(f"SELECT * FROM {name}")
    names = [d[0] for d in cur.description]
    out: collections.Counter = collections.Counter()
    for row in cur.fetchall():
        values = dict(zip(names, row))
        values.pop("_fv_key", None)
        times = values.pop("_fv_count", 1)  # (views whose rows may repeat)
        out[tuple(_norm(v) for v in values.values())] += times
    cur.close()
    return out


def check(db) -> None:
    deadline = time.monotonic() + 60
    with db.connect() as conn:
        while True:
            problems = []
            for name, sql in VIEWS.items():
                expected = collections.Counter(tuple(_norm(v) for v in r) for r in _rows(conn, sql))
                if result(conn, name) != expected:
                    problems.append(name)
            if not problems:
                return
            assert time.monotonic() < deadline, f"result tables differ from the SQL: {problems}"
            time.sleep(0.3)


@pytest.mark.parametrize("mysql", [False, True], ids=["postgres", "mariadb"])
def test_the_demo_keeps_its_views_equal_to_the_sql(mysql, tmp_path, capsys):
    checked = []

    def before_stop(db) -> None:
        check(db)
        checked.append(True)

    run_demo(duration=4, n_orders=3000, rate=40, data_dir=tmp_path / "demo", mysql=mysql, before_stop=before_stop)
    assert checked, "the demo ended before its views were checked"
    out = capsys.readouterr().out
    assert "sample shop loaded" in out and "ready in" in out
