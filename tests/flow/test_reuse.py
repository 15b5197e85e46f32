"""``register_view(reusing=)``: a view's first computation starting from another view's operator state
(``runtime.reuse``), as an alter's population does, is the view a flow computing it from scratch gets,
and so is every step after it (random changes with NULLs and repeated values, checked after each)."""

from __future__ import annotations

import logging
import random

import pyarrow as pa
import pytest

from freshview.flow import IncrementalFlow

BASE = "FROM o JOIN c ON o.c = c.id WHERE c.ok"
CASES = {  # old view, new view: what they share
    "the join, another aggregate": (
        f"SELECT o.c, SUM(o.v) AS s, COUNT(*) AS n {BASE} GROUP BY o.c",
        f"SELECT o.c, SUM(o.v) AS s, COUNT(*) AS n, MAX(o.v) AS m, COUNT(DISTINCT o.v) AS d {BASE} GROUP BY o.c"),
    "the aggregate, a HAVING on top": (
        f"SELECT o.c, SUM(o.v) AS s, COUNT(*) AS n, MIN(o.v) AS lo {BASE} GROUP BY o.c",
        f"SELECT o.c, SUM(o.v) AS s, COUNT(*) AS n, MIN(o.v) AS lo {BASE} GROUP BY o.c HAVING COUNT(*) > 1"),
    "the join, another projection": (
        f"SELECT o.id, o.v, c.id AS cid {BASE}",
        f"SELECT o.id, o.v * 2 AS v2 {BASE} AND o.v IS NOT NULL"),
    "a global aggregate": (
        "SELECT COUNT(*) AS n, SUM(v) AS s, AVG(v) AS a FROM o",
        "SELECT n + 1 AS n1, s FROM (SELECT COUNT(*) AS n, SUM(v) AS s, AVG(v) AS a FROM o) t"),
    "a DISTINCT": (
        f"SELECT DISTINCT o.v, c.ok {BASE}",
        f"SELECT v FROM (SELECT DISTINCT o.v, c.ok {BASE}) t WHERE v > 3"),
}


def _rows(flow: IncrementalFlow, name: str) -> list:
    return sorted(flow.snapshot(name).to_pylist(), key=repr)


class _Tables:
    """The database's tables as Python rows, and random changes to them (a NULL or repeated value often)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.o = {i: self._order(i) for i in range(60)}
        self.c = {i: self._customer(i) for i in range(12)}
        self.next = 60

    def _order(self, i: int) -> tuple:
        r = self.rng
        return (i, r.choice([None, *range(12)]), r.choice([None, 1, 2, 3, 5, 5, 8]))

    def _customer(self, i: int) -> tuple:
        return (i, self.rng.choice([True, True, False, None]))

    def changes(self) -> dict[str, pa.Table]:
        out: dict[str, list] = {"o": [], "c": []}
        for _ in range(self.rng.randint(1, 6)):
            table = self.rng.choice(["o", "o", "c"])
            rows = self.o if table == "o" else self.c
            kind = self.rng.choice(["insert", "delete", "update"]) if rows else "insert"
            if kind == "insert":
                key = self.next if table == "o" else max(rows, default=-1) + 1
                self.next += table == "o"
                rows[key] = self._order(key) if table == "o" else self._customer(key)
                out[table].append((rows[key], 1))
                continue
            key = self.rng.choice(sorted(rows))
            if any(r[0][0] == key for r in out[table]):
                continue  # (one change per row a batch)
            out[table].append((rows.pop(key), -1))
            if kind == "update":
                rows[key] = self._order(key) if table == "o" else self._customer(key)
                out[table].append((rows[key], 1))
        return {t: _batch(t, rows) for t, rows in out.items() if rows}

    def initial(self) -> dict[str, pa.Table]:
        return {"o": _batch("o", [(r, 1) for r in self.o.values()]), "c": _batch("c", [(r, 1) for r in self.c.values()])}


def _batch(table: str, rows: list) -> pa.Table:
    names = ["id", "c", "v"] if table == "o" else ["id", "ok"]
    columns = {n: [r[i] for r, _ in rows] for i, n in enumerate(names)}
    schema = pa.schema([("id", pa.int32()), ("c", pa.int32()), ("v", pa.int32())] if table == "o"
                       else [("id", pa.int32()), ("ok", pa.bool_())])
    return pa.table(columns, schema=schema).append_column("_weight", pa.array([w for _, w in rows], pa.int64()))


def _flow(tmp_path, name: str, first: str = "local") -> IncrementalFlow:
    flow = IncrementalFlow(state_dir=tmp_path / name, execution="local", first_computation=first)
    flow.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
    flow.register_source("c", "id INT, ok BOOLEAN", primary_key=["id"])
    return flow


@pytest.mark.parametrize("case, seed, first", [(c, s, "local") for c in sorted(CASES) for s in (1, 2)] + [
    ("the join, another aggregate", 3, "spark"), ("the join, another projection", 3, "spark")])
def test_a_view_started_from_another_views_state_steps_like_one_computed_alone(tmp_path, case, seed, first, caplog):
    old_sql, new_sql = CASES[case]
    tables = _Tables(random.Random(seed))
    main = _flow(tmp_path, "main")
    main.tick(tables.initial())
    main.register_view("old", old_sql)
    for _ in range(5):  # the old view's state is made of steps, not only its first computation
        main.tick(tables.changes())
    # the moment an alter's population starts: the sources and the old view pinned together
    pinned_view, pinned = main.pin_view("old"), {s: main.pin_source(s) for s in ("o", "c")}
    behind = [tables.changes() for _ in range(3)]  # committed meanwhile: the population's catch-up
    for change in behind:
        main.tick(change)
    scratch, reference = _flow(tmp_path, "scratch", first), _flow(tmp_path, "reference")
    for source, pin in pinned.items():
        scratch.adopt_source(source, pin)
    with caplog.at_level(logging.INFO, logger="freshview"):
        scratch.register_view("new", new_sql, reusing=pinned_view)
    assert "state reused from old" in caplog.text  # (else this test checks nothing new)
    for change in behind:
        scratch.tick(change)
    reference.tick({s: pa.table(main.snapshot(s, weighted=True).to_pydict()) .cast(_batch(s, []).schema)
                    for s in ("o", "c")})
    reference.register_view("new", new_sql)
    assert _rows(scratch, "new") == _rows(reference, "new")
    for _ in range(25):
        change = tables.changes()
        scratch.tick(change)
        reference.tick(change)
        assert _rows(scratch, "new") == _rows(reference, "new")
    scratch.close()
    scratch = IncrementalFlow(state_dir=tmp_path / "scratch", execution="local")  # its state as a resumed flow's
    change = tables.changes()
    scratch.tick(change)
    reference.tick(change)
    assert _rows(scratch, "new") == _rows(reference, "new")


def test_nothing_shared_computes_the_view_as_usual(tmp_path, caplog):
    tables = _Tables(random.Random(3))
    main, scratch = _flow(tmp_path, "main"), _flow(tmp_path, "scratch")
    for flow in (main, scratch):
        flow.tick(tables.initial())
    main.register_view("old", "SELECT c, COUNT(*) AS n FROM o GROUP BY c")
    with caplog.at_level(logging.INFO, logger="freshview"):
        scratch.register_view("new", "SELECT v, COUNT(*) AS n FROM o GROUP BY v", reusing=main.pin_view("old"))
    assert "reused" not in caplog.text
    assert _rows(scratch, "new") != []
