"""IncrementalFlow(state_ttl=...): keys of source, join and aggregate state untouched for longer than the TTL are
evicted silently; before anything is old enough results are exact; a late change to an evicted key is new and
a re-started group's row replaces the old one; state stays bounded over ever-new keys; reopening goes on."""

from __future__ import annotations

import collections
import random

import duckdb
import pyarrow as pa
import pytest

from freshview import IncrementalFlow
from freshview.errors import FreshviewError
from freshview.schema import schema_from_ddl
from tests.support.streams import RandomTable


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(IncrementalFlow, "_clock", staticmethod(c))  # also what a flow reads while opening
    return c


def rows(table: pa.Table) -> collections.Counter:
    weighted = "_weight" in table.column_names
    out: collections.Counter = collections.Counter()
    for r in zip(*(c.to_pylist() for c in table.columns)):
        out[tuple(r[:-1]) if weighted else r] += r[-1] if weighted else 1
    return +out


def state_rows(flow: IncrementalFlow, prefix: str = "") -> int:
    """Rows of every arrangement except views' results (what the TTL bounds)."""
    return sum(flow.store.count(a) for a in flow.store.list_arrangements(prefix) if not a.endswith("/out"))


ORDERS = "id INT, g INT, v INT"
CUSTOMERS = "g INT, name TEXT"


def orders(rows_, weight=1):
    return pa.table({"id": pa.array([r[0] for r in rows_], pa.int32()),
                     "g": pa.array([r[1] for r in rows_], pa.int32()),
                     "v": pa.array([r[2] for r in rows_], pa.int32()), "_weight": [weight] * len(rows_)})


def customers(rows_, weight=1):
    return pa.table({"g": pa.array([r[0] for r in rows_], pa.int32()), "name": [r[1] for r in rows_],
                     "_weight": [weight] * len(rows_)})


# ---------------------------------------------------------------------- (1) exact while nothing is old enough
EXACT_VIEWS = {
    "j": "SELECT a.id, a.k, a.v, b.w FROM a JOIN b ON a.k = b.k",
    "s": "SELECT k, SUM(v) AS s, COUNT(*) AS n, COUNT(v) AS nv FROM a GROUP BY k",
    "m": "SELECT k, MIN(v) AS lo, MAX(v) AS hi FROM a GROUP BY k HAVING COUNT(*) > 0",
    "d": "SELECT DISTINCT k, w FROM b",
}


@pytest.mark.parametrize("execution", ["local", "spark"])
def test_results_are_exact_while_no_key_is_older_than_the_ttl(make_flow, clock, execution):
    rng = random.Random(12)
    a = RandomTable("a", schema_from_ddl("id INT, k INT, v INT"), rng,  # no key: duplicate rows
                    domains={"k": [0, 1, 2, 3, 4, None], "id": list(range(8))}, null_prob=0.2)
    b = RandomTable("b", schema_from_ddl("k INT, w INT"), rng, domains={"k": [0, 1, 2, 5, None], "w": [1, 2, None]})
    flows = [make_flow(execution=execution, state_ttl="1 day"), make_flow(execution=execution)]
    for f in flows:
        f.register_source("a", "id INT, k INT, v INT")
        f.register_source("b", "k INT, w INT")
    first = {"a": a.step(12, inserts_only=True), "b": b.step(6, inserts_only=True)}
    for f in flows:
        f.tick(first)
        f.register_views(list(EXACT_VIEWS.items()))  # first computations touch every key they hold
    db = duckdb.connect()
    for step in range(6 if execution == "spark" else 30):
        clock.now += rng.choice([1, 60, 3600])  # well inside the day
        delta = {"a": a.step(rng.randint(1, 6))}
        if rng.random() < 0.5:
            delta["b"] = b.step(rng.randint(1, 3))
        summaries = [f.tick(delta) for f in flows]
        assert summaries[0].evicted == 0 and summaries[0].late_deletes == 0
        db.register("a", a.current())
        db.register("b", b.current())
        for name, sql in EXACT_VIEWS.items():
            expected = +collections.Counter(db.execute(sql).fetchall())
            for f in flows:
                assert rows(f.snapshot(name)) == expected, (step, name, f.state_ttl)
    assert "state ttl: 86400 s; evicting: op" in flows[0].explain("j")


# ---------------------------------------------------------------------- (2) eviction
def _shop(make_flow, execution, **kwargs):
    f = make_flow(execution=execution, state_ttl=100, **kwargs)
    f.register_source("o", ORDERS, primary_key=["id"])
    f.register_source("c", CUSTOMERS, primary_key=["g"])
    f.register_view("s", "SELECT g, SUM(v) AS s, COUNT(*) AS n, MIN(v) AS lo FROM o GROUP BY g")
    f.register_view("j", "SELECT id, v, name FROM o JOIN c ON o.g = c.g")
    return f


@pytest.mark.parametrize("execution", ["local", "spark"])
def test_untouched_keys_are_evicted_and_a_late_change_starts_anew(make_flow, clock, execution):
    clock.now = 1000
    f = _shop(make_flow, execution)
    watch = f.watch_output("s")
    f.tick({"o": orders([(1, 1, 10), (2, 1, 5), (3, 2, 7)]), "c": customers([(1, "a"), (2, "b")])})
    clock.now = 1050
    assert f.tick("o", orders([(4, 2, 1)])).evicted == 0  # touches group 2 and join key 2
    before = state_rows(f)
    clock.now = 1120  # 100 s after the first step's bucket ended: its untouched keys go
    summary = f.tick("o", orders([(5, 3, 3)]))
    # source o: ids 1, 2, 3; source c: keys 1, 2; join: key 1; aggregate: group 1.
    assert summary.evicted == 3 + 2 + 1 + 1 and "7 keys evicted" in str(summary)
    assert f.store.count("source/o") == 2 and f.store.count("source/c") == 0
    acc = [a for a in f.store.list_arrangements("view/s/") if a.endswith("/acc")][0]
    assert f.store.count(acc) == 2  # groups 2 and 3
    left = [a for a in f.store.list_arrangements("view/j/") if a.endswith("/left")][0]
    assert f.store.count(left) == 3 and f.store.count(left.replace("left", "right")) == 1  # key 2 lives
    assert state_rows(f) < before + 4
    # Silent: the views keep what eviction dropped.
    assert rows(f.snapshot("s")) == collections.Counter({(1, 15, 2, 5): 1, (2, 8, 2, 1): 1, (3, 3, 1, 3): 1})
    assert rows(f.snapshot("j")) == collections.Counter({(1, 10, "a"): 1, (2, 5, "a"): 1, (3, 7, "b"): 1,
                                                         (4, 1, "b"): 1})
    watch.poll()
    # A late change to evicted group 1 starts it from itself alone; its row replaces the old one.
    clock.now = 1121
    f.tick("o", orders([(6, 1, 100)]))
    assert rows(f.snapshot("s")) == collections.Counter({(1, 100, 1, 100): 1, (2, 8, 2, 1): 1, (3, 3, 1, 3): 1})
    [batch] = watch.poll()  # the replacement is an update of the group's row
    assert sorted(batch.table.to_pylist(), key=lambda r: r["_weight"]) == [
        {"g": 1, "s": 15, "n": 2, "lo": 5, "_weight": -1}, {"g": 1, "s": 100, "n": 1, "lo": 100, "_weight": 1}]
    # Join key 1 was evicted on both sides: order 6 meets no customer.
    assert (6, 100, "a") not in rows(f.snapshot("j"))
    # Customer 2's row left source c, but join key 2 lives on: an update's old row is a late delete that
    # still reaches the join, so the join holds the new name only.
    summary = f.tick("c", pa.concat_tables([customers([(2, "b")], -1), customers([(2, "B")])]))
    assert summary.late_deletes == 1 and f.store.count("source/c") == 1
    assert rows(f.snapshot("j")) == collections.Counter({(1, 10, "a"): 1, (2, 5, "a"): 1, (3, 7, "B"): 1,
                                                         (4, 1, "B"): 1})
    # A late delete whose join key was evicted meets nothing: no negative rows anywhere.
    f.tick("o", orders([(1, 1, 10)], -1))
    assert all(w > 0 for w in f.snapshot("j", weighted=True).column("_weight").to_pylist())
    assert all(w > 0 for w in f.store.scan(left).column("_weight").to_pylist())
    # Everything goes; a late update of order 4 restarts group 2 from its new row (the old one is not
    # there to delete) and replaces the group's row.
    clock.now = 1400
    assert f.tick("o", orders([(9, 9, 9)])).evicted > 0
    f.tick("o", pa.concat_tables([orders([(4, 2, 1)], -1), orders([(4, 2, 9)])]))
    assert [(r, n) for r, n in rows(f.snapshot("s")).items() if r[0] == 2] == [((2, 9, 1, 9), 1)]


def test_a_regrouped_view_holds_one_row_per_group(make_flow, clock):
    clock.now = 1000
    f = make_flow(execution="local", state_ttl="100 s")
    f.register_source("o", ORDERS, primary_key=["id"])
    f.register_views([("big", "SELECT g, SUM(v) AS s FROM o GROUP BY g HAVING SUM(v) > 10"),
                      ("groups", "SELECT DISTINCT g FROM o"),
                      ("named", "SELECT s AS total, g AS grp FROM (SELECT g, SUM(v) AS s FROM o GROUP BY g) t")])
    f.tick("o", orders([(1, 1, 10), (2, 1, 5), (3, None, 20)]))
    clock.now = 1200
    f.tick("o", orders([(4, 2, 1)]))  # evicts groups 1 and NULL everywhere
    assert rows(f.snapshot("big")) == collections.Counter({(1, 15): 1, (None, 20): 1})
    f.tick("o", orders([(5, 1, 3), (6, None, 30)]))
    assert rows(f.snapshot("big")) == collections.Counter({(None, 30): 1})  # group 1 fails HAVING now
    assert rows(f.snapshot("groups")) == collections.Counter({(1,): 1, (2,): 1, (None,): 1})
    assert rows(f.snapshot("named")) == collections.Counter({(3, 1): 1, (1, 2): 1, (30, None): 1})


def test_views_over_a_ttl_view_follow_its_replacements(make_flow, clock):
    clock.now = 1000
    f = make_flow(execution="local", state_ttl=100)
    f.register_source("o", ORDERS, primary_key=["id"])
    f.register_views([("s", "SELECT g, SUM(v) AS s, COUNT(*) AS n FROM o GROUP BY g"),
                      ("all", "SELECT COUNT(*) AS groups, SUM(s) AS total FROM s"),  # global: never evicted
                      ("many", "SELECT g, s FROM s WHERE n > 1")])  # no state: follows s exactly
    rng = random.Random(3)
    evicted = 0
    for step in range(40):
        clock.now += rng.choice([5, 20, 60])
        evicted += f.tick("o", orders([(step, rng.randint(0, 6), rng.randint(1, 9))])).evicted
        groups = rows(f.snapshot("s"))
        assert len({g for g, _, _ in groups}) == sum(groups.values())  # one row per group
        assert rows(f.snapshot("all")) == collections.Counter(
            {(len(groups), sum(s_ for _, s_, _ in groups)): 1})
        assert rows(f.snapshot("many")) == collections.Counter({(g, s_): 1 for g, s_, n in groups if n > 1})
    assert evicted > 20


def test_a_state_ttl_is_read_and_checked(make_flow):
    assert make_flow(state_ttl="1 day").state_ttl == 86400 and make_flow(state_ttl=1.5).state_ttl == 1.5
    assert make_flow().state_ttl is None
    with pytest.raises(FreshviewError, match="cannot read the interval"):
        make_flow(state_ttl="forever")
    with pytest.raises(FreshviewError, match="longer than 0"):
        make_flow(state_ttl=0)


def test_debezium_changes_to_evicted_keys_are_new(make_flow, clock):
    clock.now = 1000
    f = _shop(make_flow, "local")
    f.tick_debezium("o", [{"op": "c", "after": {"id": 1, "g": 1, "v": 10}},
                          {"op": "c", "after": {"id": 2, "g": 1, "v": 5}}])
    clock.now = 1200
    f.tick_debezium("o", [{"op": "c", "after": {"id": 3, "g": 2, "v": 1}}])  # ids 1, 2 and group 1 go
    # A delete of an evicted key is nothing; an update inserts its after and deletes its before.
    f.tick_debezium("o", [{"op": "d", "before": {"id": 1, "g": 1, "v": 10}},
                          {"op": "u", "before": {"id": 2, "g": 1, "v": 5}, "after": {"id": 2, "g": 1, "v": 6}}])
    assert rows(f.snapshot("o")) == collections.Counter({(2, 1, 6): 1, (3, 2, 1): 1})
    assert rows(f.snapshot("s")) == collections.Counter({(1, 6, 1, 6): 1, (2, 1, 1, 1): 1})


# ---------------------------------------------------------------------- (3) bounded state
def test_state_stays_bounded_over_ever_new_keys(make_flow, clock):
    clock.now = 1000
    f = _shop(make_flow, "local")
    sizes = []
    for step in range(200):
        clock.now += 1
        ids = [step * 5 + i for i in range(5)]
        delta = {"o": orders([(i, step, i % 7) for i in ids]), "c": customers([(step, f"c{step}")])}
        if step >= 2:  # an order of two steps ago changes: deletes too
            old = (step - 2) * 5
            delta["o"] = pa.concat_tables([delta["o"], orders([(old, step - 2, old % 7)], -1),
                                           orders([(old, step - 2, 99)])])
        f.tick(delta)
        sizes.append(state_rows(f))
    # Per second 6 new rows in sources, joins and aggregates; keys live 100-110 s: the state levels off.
    assert max(sizes[120:]) <= max(sizes[100:120]) + 30, sizes
    assert max(sizes) < 6000 and sizes[-1] < sizes[110] * 1.2
    assert f.store.count("source/o") <= 5 * 112
    assert len(f.snapshot("s")) == 200  # the view itself keeps every group (eviction is silent)


# ---------------------------------------------------------------------- (4) restart
def test_a_reopened_flow_keeps_evicting(make_flow, clock, tmp_path):
    state = tmp_path / "shop"
    clock.now = 1000
    f = _shop(make_flow, "local", state_dir=state)
    f.tick("o", orders([(1, 1, 10), (2, 2, 5)]))
    f.close()
    clock.now = 1080
    f = _shop(make_flow, "local", state_dir=state)
    assert f.tick("o", orders([(3, 2, 1)])).evicted == 0
    f.close()
    clock.now = 1150
    f = _shop(make_flow, "local", state_dir=state)
    # ids 1 and 2, group 1 and join key 1 (group and join key 2 were touched at 1080)
    assert f.tick("o", orders([(4, 3, 1)])).evicted == 4
    assert f.store.count("source/o") == 2
    f.close()
    # Steps without a TTL go unrecorded: the next flow with one indexes every key as touched when it opens.
    f = make_flow(execution="local", state_dir=state)
    f.tick("o", orders([(5, 5, 1)]))
    f.close()
    clock.now = 5000
    f = _shop(make_flow, "local", state_dir=state)
    assert f.tick("o", orders([(6, 6, 1)])).evicted == 0
    clock.now = 5111
    # ids 3-6, groups and join keys 2, 3, 5, 6: the reopening and the step at 5000 share a bucket
    assert f.tick("o", orders([(7, 7, 1)])).evicted == 4 + 4 + 4
    assert f.store.count("source/o") == 1


def test_a_flow_written_without_a_ttl_takes_one(make_flow, clock, tmp_path):
    state = tmp_path / "old"
    clock.now = 1000
    f = make_flow(execution="local", state_dir=state)
    f.register_source("o", ORDERS, primary_key=["id"])
    f.register_view("s", "SELECT g, SUM(v) AS s FROM o GROUP BY g")
    f.tick("o", orders([(1, 1, 10), (2, 2, 5)]))
    assert f.store.layout("view/s/out").key == ()
    f.close()
    f = make_flow(execution="local", state_dir=state, state_ttl=100)
    assert f.store.layout("view/s/out").key == ("c0",)  # keyed by the group: re-started groups are replaced
    assert rows(f.snapshot("s")) == collections.Counter({(1, 10): 1, (2, 5): 1})
    clock.now = 1200
    assert f.tick("o", orders([(3, 1, 1)])).evicted == 2 + 2
    assert rows(f.snapshot("s")) == collections.Counter({(1, 1): 1, (2, 5): 1})


def test_a_restored_checkpoint_keeps_its_ttl_bookkeeping(make_flow, clock, tmp_path):
    clock.now = 1000
    f = _shop(make_flow, "local")
    f.tick("o", orders([(1, 1, 10), (2, 2, 5)]))
    clock.now = 1060
    f.tick("o", orders([(3, 2, 1)]))
    f.checkpoint(str(tmp_path / "ck"))
    g = make_flow(execution="local", state_ttl=100)
    g.restore(str(tmp_path / "ck"))
    clock.now = 1111
    # ids 1, 2, group 1 and join key 1 (touched at 1000 only); the restored flow knows when each was touched.
    assert g.tick("o", orders([(4, 3, 1)])).evicted == 4
    assert rows(g.snapshot("s")) == collections.Counter({(1, 10, 1, 10): 1, (2, 6, 2, 1): 1, (3, 1, 1, 1): 1})
