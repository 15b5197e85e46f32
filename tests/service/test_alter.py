"""``alter_view``: a view's new SQL populated beside the old one (which goes on), then swapped into its result
table in one transaction.  ``requests.serve`` and the swap's choice without a database; then end to end on
PostgreSQL, under concurrent writes with a reader that must never see an empty table or a mix of the two
definitions, every result compared with PostgreSQL's own answer to the view's SQL."""

from __future__ import annotations

import logging
import random
import threading
import time

import psycopg
import psycopg.conninfo
import pytest

from freshview.connectors.base import Request
from freshview.connectors.postgres import swap
from freshview.connectors.postgres.sink import ResultShape
from freshview.errors import SqlError
from freshview.service import requests
from tests.service.test_requests import Views
from tests.service.test_service import random_transaction, shop  # noqa: F401 - a fixture
from tests.support.service import ProcessService, wait_for_status, wait_until_fresh


class AlterViews(Views):
    """``Views`` that records whether ``populate`` was asked to alter."""

    def populate(self, name: str, sql: str, position, *, request, reader, blocking, processed, admitted,
                 alter=False):
        self.calls.append(("alter" if alter else "populate", name, admitted))
        if name in self.busy:
            from freshview.service import populating
            raise populating.MustWait(f"{name} waits")
        if sql == "bad":
            raise SqlError("freshview: syntax error at or near \"bad\"")
        return f"plan {name}"


def test_an_alter_request_is_planned_like_a_create_and_a_refusal_is_answered():
    views = AlterViews(Request(1, "alter", "public.a", "SELECT 2"), Request(2, "alter", "public.b", "bad"),
                       Request(3, "alter", "public.c", "SELECT 1"))
    views.busy = {"public.c"}
    held: list[Request] = []
    plans = requests.serve(views, None, lambda: False, held=held)  # type: ignore[arg-type]
    assert plans == ["plan public.a"]
    assert views.calls == [("alter", "public.a", False), ("alter", "public.b", False), ("alter", "public.c", False)]
    assert views.answers == {2: 'freshview: syntax error at or near "bad"'}
    assert [r.id for r in held] == [3]  # waits as a create does
    views.queue = [Request(4, "drop", "c", None)]
    requests.serve(views, None, lambda: False, held=held)  # type: ignore[arg-type]
    assert views.answers[3] == "freshview: view public.c was dropped before it was altered"
    text = requests.failure_text("alter", "public.a", KeyError("x"), (SqlError,))
    assert text.startswith("freshview: altering view public.a failed with an internal error")


def test_the_swap_keeps_the_table_alters_it_in_place_or_replaces_it():
    old = ResultShape((("customer", "integer"), ("n", "bigint")), ("customer",), False, False)
    assert swap.how(old, old) is swap.How.REFILL
    added = ResultShape((("customer", "integer"), ("n", "bigint"), ("total", "numeric")), ("customer",), False, False)
    assert swap.how(old, added) is swap.How.ALTER
    assert swap.alter_columns(old, added) == [("add", "total", "numeric")]
    retyped = ResultShape((("customer", "integer"), ("n", "double precision")), ("customer",), False, False)
    assert swap.alter_columns(added, retyped) == [("drop", "total", None), ("type", "n", "double precision")]
    rekeyed = ResultShape((("region", "text"), ("n", "bigint")), ("region",), False, False)
    assert swap.how(old, rekeyed) is swap.How.REPLACE
    counted = ResultShape(old.columns, (), True, False)
    assert swap.how(old, counted) is swap.How.REPLACE
    assert swap.how(None, old) is swap.How.REPLACE


# ---------------------------------------------------------------------------------------------- PostgreSQL
OLD = "SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders WHERE status <> 'cancelled' GROUP BY customer"
# the same columns (names and types), another filter; its n is negative, so a reader can tell the two apart
NEW = ("SELECT customer, COUNT(*) - 1000000 AS n, SUM(amount) AS total FROM orders WHERE status = 'paid' "
       "GROUP BY customer")


class Writer:
    """Random transactions in a thread until stopped."""

    def __init__(self, dsn: str, seed: int) -> None:
        self.stop = threading.Event()
        self.committed = 0
        self.rng, self.next_id = random.Random(seed), [600]
        self.thread = threading.Thread(target=self._run, args=(dsn,), daemon=True)
        self.thread.start()

    def _run(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                random_transaction(conn, self.rng, self.next_id)
                self.committed += 1
                time.sleep(0.005)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)


class Reader:
    """Polls the result table in a thread: each read must be non-empty and all old rows (n > 0) or all new
    rows (n < 0)."""

    def __init__(self, dsn: str, table: str) -> None:
        self.stop = threading.Event()
        self.reads = 0
        self.seen: list[str] = []
        self.problems: list[str] = []
        self.thread = threading.Thread(target=self._run, args=(dsn, table), daemon=True)
        self.thread.start()

    def _run(self, dsn: str, table: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                rows, positive = conn.execute(f"SELECT count(*), count(*) FILTER (WHERE n > 0) FROM {table}").fetchone()
                self.reads += 1
                kind = "empty" if rows == 0 else "old" if positive == rows else "new" if positive == 0 else "mix"
                if kind in ("empty", "mix"):
                    self.problems.append(f"read {self.reads}: {kind} ({rows} rows, {positive} old)")
                if not self.seen or self.seen[-1] != kind:
                    self.seen.append(kind)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)


def test_alter_with_the_same_columns_keeps_the_table_and_readers_never_see_a_gap(shop, start_service, caplog):
    caplog.set_level(logging.INFO, logger="freshview")
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view('public.totals', %s)", (OLD,))
        conn.execute("CREATE INDEX totals_total ON totals (total)")
        conn.execute("COMMENT ON TABLE totals IS 'mine'")
        conn.execute("DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fv_alter_reader') THEN "
                     "CREATE ROLE fv_alter_reader; END IF; END$$")
        conn.execute("GRANT SELECT ON totals TO fv_alter_reader")
        conn.execute("CREATE VIEW totals_big AS SELECT customer FROM totals WHERE total > 1000")
        oid = conn.execute("SELECT 'totals'::regclass::oid").fetchone()[0]
        writer = Writer(shop, 3)
        reader = Reader(shop, "totals")
        try:
            time.sleep(0.5)
            conn.execute("CALL freshview.alter_view('public.totals', %s)", (NEW,))
            time.sleep(0.5)
        finally:
            writer.finish()
            reader.finish()
        assert writer.committed > 20 and reader.reads > 20
        assert reader.problems == [] and reader.seen == ["old", "new"], (reader.problems[:5], reader.seen)
        # the table kept: only the rows that differ were written (``result_changes.replacing``)
        assert any("result table kept, " in r.getMessage() and "rows changed" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records if "result table" in r.getMessage()]
        wait_until_fresh(shop, ["public.totals"], timeout=60)  # (compared with the stored SQL: the new one)
        row = conn.execute("SELECT sql, status, phase, error, altered_at IS NOT NULL FROM freshview.views "
                           "WHERE name = 'public.totals'").fetchone()
        assert row == (NEW, "active", None, None, True)
        assert conn.execute("SELECT 'totals'::regclass::oid, obj_description('totals'::regclass), "
                            "has_table_privilege('fv_alter_reader', 'totals', 'SELECT'), "
                            "to_regclass('totals_total') IS NOT NULL, "
                            "(SELECT count(*) FROM totals_big) >= 0").fetchone() == (oid, "mine", True, True, True)
        rng, next_id = random.Random(5), [5000]
        for _ in range(20):  # and it stays right through further changes
            random_transaction(conn, rng, next_id)
        wait_until_fresh(shop, ["public.totals"], timeout=60)


def test_alter_adds_drops_and_retypes_columns_in_place(shop, start_service):
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view('public.by_customer', %s)",
                     ("SELECT customer, COUNT(*) AS n FROM orders WHERE amount > 10 GROUP BY customer",))
        conn.execute("CREATE INDEX by_customer_n ON by_customer (n)")
        oid = conn.execute("SELECT 'by_customer'::regclass::oid").fetchone()[0]
        writer = Writer(shop, 4)
        try:
            # an added aggregate column (amount is read already: populated beside the old view)
            conn.execute("CALL freshview.alter_view('public.by_customer', %s)",
                         ("SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders WHERE amount > 10 "
                          "GROUP BY customer",))
            assert [c for c, in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'by_customer'::regclass "
                                              "AND attnum > 0 AND NOT attisdropped ORDER BY attnum")] == \
                ["customer", "n", "total"]
            wait_until_fresh(shop, ["public.by_customer"], timeout=60)
            # a column dropped and one retyped (n: bigint -> double precision)
            conn.execute("CALL freshview.alter_view('public.by_customer', %s)",
                         ("SELECT customer, AVG(amount)::float8 AS n FROM orders WHERE amount > 10 GROUP BY customer",))
            wait_until_fresh(shop, ["public.by_customer"], timeout=60)
            # a column the engine does not keep yet (note): done in the loop, the table still kept
            conn.execute("CALL freshview.alter_view('public.by_customer', %s)",
                         ("SELECT customer, AVG(amount)::float8 AS n, MAX(note) AS note FROM orders WHERE amount > 10 "
                          "GROUP BY customer",))
        finally:
            writer.finish()
        wait_until_fresh(shop, ["public.by_customer"], timeout=60)
        assert conn.execute("SELECT 'by_customer'::regclass::oid, to_regclass('by_customer_n') IS NOT NULL, "
                            "format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                            "'by_customer'::regclass AND attname = 'n'").fetchone() == (oid, True, "double precision")
        rng, next_id = random.Random(6), [5000]
        for _ in range(15):
            random_transaction(conn, rng, next_id)
        wait_until_fresh(shop, ["public.by_customer"], timeout=60)


def test_a_refused_alter_leaves_the_old_view_running_and_says_why(shop, start_service):
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fv_alter_user') THEN "
                     "CREATE ROLE fv_alter_user LOGIN; END IF; END$$")
        conn.execute("GRANT SELECT ON customers TO fv_alter_user")
        params = psycopg.conninfo.conninfo_to_dict(shop)
        params["user"] = "fv_alter_user"
        with psycopg.connect(psycopg.conninfo.make_conninfo(**params), autocommit=True) as user:
            user.execute("CALL freshview.create_view('public.mine', "
                         "'SELECT region, COUNT(*) AS n FROM customers GROUP BY region')")
            with pytest.raises(psycopg.errors.RaiseException, match="permission denied"):
                user.execute("CALL freshview.alter_view('public.mine', "
                             "'SELECT status AS region, COUNT(*) AS n FROM orders GROUP BY status')")
            with pytest.raises(psycopg.errors.RaiseException, match="column \"nope\" does not exist|nope"):
                user.execute("CALL freshview.alter_view('public.mine', "
                             "'SELECT nope, COUNT(*) AS n FROM customers GROUP BY nope')")
            with pytest.raises(psycopg.errors.RaiseException, match="no view named public.nothing to alter"):
                user.execute("CALL freshview.alter_view('public.nothing', 'SELECT 1 AS x')")
        with pytest.raises(psycopg.errors.RaiseException, match="permission denied to alter view public.mine"):
            # another plain user may not alter it
            conn.execute("DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fv_alter_other') THEN "
                         "CREATE ROLE fv_alter_other LOGIN; END IF; END$$")
            conn.execute("GRANT SELECT ON customers TO fv_alter_other")
            params["user"] = "fv_alter_other"
            with psycopg.connect(psycopg.conninfo.make_conninfo(**params), autocommit=True) as other:
                other.execute("CALL freshview.alter_view('public.mine', "
                              "'SELECT region, COUNT(*) + 1 AS n FROM customers GROUP BY region')")
        assert conn.execute("SELECT sql, status, phase FROM freshview.views WHERE name = 'public.mine'").fetchone() == (
            "SELECT region, COUNT(*) AS n FROM customers GROUP BY region", "active", None)
        conn.execute("UPDATE customers SET region = 'west' WHERE id <= 5")
        wait_until_fresh(shop, ["public.mine"], timeout=60)


def test_a_service_stopped_mid_swap_rebuilds_the_view_from_its_stored_sql(shop, start_service, tmp_path):
    service = start_service(tmp_path / "s")
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view('public.totals', %s)", (OLD,))
        service.stop()
        # as a service killed between the engine's swap and the table's leaves it
        conn.execute("UPDATE freshview.views SET phase = 'swapping' WHERE name = 'public.totals'")
        conn.execute("UPDATE orders SET status = 'open' WHERE id <= 30")
        service = start_service(tmp_path / "s")
        assert wait_for_status(conn, "public.totals", "active", timeout=60)[0] == "active"
        wait_until_fresh(shop, ["public.totals"], timeout=60)
        assert conn.execute("SELECT sql, phase FROM freshview.views WHERE name = 'public.totals'").fetchone() == (
            OLD, None)
        # the same with the alter's request still to do (retried at start): it waits for the rebuild, then is done
        service.stop()
        conn.execute("UPDATE freshview.views SET phase = 'swapping' WHERE name = 'public.totals'")
        conn.execute("SELECT freshview._submit('alter', 'public.totals', %s, NULL, false)", (NEW,))
        start_service(tmp_path / "s")
        deadline = time.monotonic() + 60
        while conn.execute("SELECT sql FROM freshview.views WHERE name = 'public.totals'").fetchone()[0] != NEW:
            assert time.monotonic() < deadline, conn.execute("SELECT * FROM freshview.requests").fetchall()
            time.sleep(0.1)
        wait_until_fresh(shop, ["public.totals"], timeout=60)
        assert conn.execute("SELECT state FROM freshview.requests WHERE action = 'alter'").fetchone() == ("done",)


def test_a_service_killed_mid_alter_keeps_the_old_view_and_retries_the_alter(shop, tmp_path):
    state, log = tmp_path / "state", tmp_path / "service.log"
    service = ProcessService(shop, state, log)
    service.wait_ready(shop)
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view('public.totals', %s)", (OLD,))
        conn.execute("SELECT freshview._submit('alter', 'public.totals', %s, NULL, false)", (NEW,))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # killed as soon as the alter has started
            row = conn.execute("SELECT phase, sql FROM freshview.views WHERE name = 'public.totals'").fetchone()
            if row[0] is not None or row[1] == NEW:
                break
            time.sleep(0.01)
        service.kill()
        assert conn.execute("SELECT count(*) FROM totals").fetchone()[0] > 0
        conn.execute("UPDATE orders SET status = 'paid' WHERE id <= 30")
        service = ProcessService(shop, state, log)
        service.wait_ready(shop)
        deadline = time.monotonic() + 60  # the alter is retried (requests.recover) or was done
        while conn.execute("SELECT sql FROM freshview.views WHERE name = 'public.totals'").fetchone()[0] != NEW:
            assert time.monotonic() < deadline, service.output()
            time.sleep(0.2)
        try:
            wait_until_fresh(shop, ["public.totals"], timeout=60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nservice log:\n{service.output()}") from None
        assert conn.execute("SELECT state FROM freshview.requests WHERE action = 'alter'").fetchone() == ("done",)
        assert service.terminate() == 0, service.output()


def test_while_an_alter_populates_the_old_view_goes_on_and_shows_its_phase(shop, start_service, monkeypatch):
    from freshview.service import loading
    gate, reached = threading.Event(), threading.Event()
    original = loading.compute_first

    def held(flow, view, sql, *args):
        if "1000000" in sql:  # the new definition's first computation waits
            reached.set()
            assert gate.wait(120)
        return original(flow, view, sql, *args)

    monkeypatch.setattr(loading, "compute_first", held)
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view('public.totals', %s)", (OLD,))
        try:
            with pytest.raises(psycopg.errors.RaiseException,  # (the CALL's timeout: the alter goes on)
                               match=r"still working on request \d+ after 3 s \(public.totals is being altered: "):
                conn.execute("CALL freshview.alter_view('public.totals', %s, timeout_s => 3)", (NEW,))
            assert reached.wait(60)
            deadline = time.monotonic() + 30
            while conn.execute("SELECT phase FROM freshview.views WHERE name = 'public.totals'").fetchone()[0] != \
                    "computing":
                assert time.monotonic() < deadline
                time.sleep(0.1)
            from freshview.service.status import view_status
            assert view_status({"status": "active", "phase": "computing", "rows_read": 600}) == \
                "active, altering: computing, 600 rows read"
            rng, next_id = random.Random(12), [5000]
            for _ in range(15):
                random_transaction(conn, rng, next_id)
            wait_until_fresh(shop, ["public.totals"], timeout=60)  # the old view, stepped meanwhile
            with pytest.raises(psycopg.errors.RaiseException, match="is being populated or altered"):
                conn.execute("CALL freshview.alter_view('public.totals', %s)", (OLD + " HAVING COUNT(*) > 1",))
        finally:
            gate.set()
        deadline = time.monotonic() + 60
        while conn.execute("SELECT sql FROM freshview.views WHERE name = 'public.totals'").fetchone()[0] != NEW:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        wait_until_fresh(shop, ["public.totals"], timeout=60)
        gate.clear()
        reached.clear()
        conn.execute("SELECT freshview._submit('alter', 'public.totals', %s, NULL, false)", (NEW + " HAVING "
                                                                                          "COUNT(*) > 1000000",))
        try:  # (its SQL holds "1000000" too: held again, then dropped)
            assert reached.wait(60)
            conn.execute("CALL freshview.drop_view('public.totals')")
        finally:
            gate.set()
        assert conn.execute("SELECT to_regclass('totals'), (SELECT count(*) FROM freshview.views)").fetchone() == (
            None, 0)
        assert conn.execute("SELECT state, error FROM freshview.requests WHERE action = 'alter' ORDER BY id DESC "
                            "LIMIT 1").fetchone() == (
            "failed", "freshview: view public.totals was dropped while it was being altered")
        gate.clear()
        reached.clear()
        conn.execute("CALL freshview.create_view_async('public.later', %s)", (NEW,))
        try:  # a view still being populated is not altered
            assert reached.wait(60)
            with pytest.raises(psycopg.errors.RaiseException, match="view public.later is being populated or altered"):
                conn.execute("CALL freshview.alter_view('public.later', %s)", (OLD,))
        finally:
            gate.set()
        assert wait_for_status(conn, "public.later", "active", timeout=60)[0] == "active"
        wait_until_fresh(shop, ["public.later"], timeout=60)


def test_an_alter_that_fails_late_puts_the_old_view_back(shop, start_service):
    """Failures after the new query was computed: the swap refused by PostgreSQL (a database view over a
    column the new query drops), and a first computation that fails inside the loop (a column not kept yet,
    divided by zero): the old view is computed again, its table kept, and goes on."""
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view('public.totals', %s)", (OLD,))
        conn.execute("CREATE VIEW totals_big AS SELECT customer FROM totals WHERE total > 1000")
        oid = conn.execute("SELECT 'totals'::regclass::oid").fetchone()[0]
        with pytest.raises(psycopg.errors.RaiseException, match="cannot alter the result table public.totals: .*"
                                                                "depend"):
            conn.execute("CALL freshview.alter_view('public.totals', %s)",
                         ("SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer",))
        with pytest.raises(psycopg.errors.RaiseException, match="division by zero|divide"):
            conn.execute("CALL freshview.alter_view('public.totals', %s)",
                         ("SELECT customer, COUNT(*) AS n, SUM(amount) AS total, MAX(100 / (length(note) - 2)) AS x "
                          "FROM orders WHERE status <> 'cancelled' GROUP BY customer",))
        assert conn.execute("SELECT sql, status, phase FROM freshview.views WHERE name = 'public.totals'").fetchone() \
            == (OLD, "active", None)
        rng, next_id = random.Random(14), [5000]
        for _ in range(15):
            random_transaction(conn, rng, next_id)
        wait_until_fresh(shop, ["public.totals"], timeout=60)
        assert conn.execute("SELECT 'totals'::regclass::oid, (SELECT count(*) FROM totals_big) >= 0").fetchone() == (
            oid, True)


def test_an_alter_reading_columns_the_copy_lacks_widens_it_beside_the_stream(shop, start_service, caplog):
    # (``widening``) the new definition reads a column of orders the engine does not keep: its population reads
    # orders again, wider, and computes the other view over orders again; both move to the wider copy at the
    # join, the other view's table kept.
    caplog.set_level(logging.INFO, logger="freshview")
    service = start_service().service
    narrow = "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer"
    wider = "SELECT customer, SUM(amount) AS total FROM orders WHERE note IS DISTINCT FROM 'x' GROUP BY customer"
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view('public.totals', %s)", (narrow,))
        conn.execute("CALL freshview.create_view('public.amounts', 'SELECT amount, count(*) AS n FROM orders GROUP BY amount')")
        assert "note" not in service.flow.source_schema(service.names.engine("public.orders")).names
        oid = conn.execute("SELECT 'public.amounts'::regclass::oid").fetchone()[0]
        conn.execute("CALL freshview.alter_view('public.totals', %s)", (wider,))
        assert "note" in service.flow.source_schema(service.names.engine("public.orders")).names
        assert conn.execute("SELECT 'public.amounts'::regclass::oid").fetchone()[0] == oid
        said = [r.getMessage() for r in caplog.records]
        assert any("view public.amounts: computed again over the wider copy beside the stream" in m for m in said)
        assert any("view public.totals altered beside the stream" in m for m in said), said
        rng, next_id = random.Random(12), [7000]
        for _ in range(20):
            random_transaction(conn, rng, next_id)
        wait_until_fresh(shop, ["public.totals", "public.amounts"], timeout=60)
        assert conn.execute("SELECT sql FROM freshview.views WHERE name = 'public.totals'").fetchone()[0] == wider


def _ship(conn: psycopg.Connection, rng: random.Random, next_id: list[int], count: int, columns: str) -> None:
    """``count`` random changes of ``shipments`` (``columns``: its columns besides id and customer now)."""
    for _ in range(count):
        op, sid = rng.random(), rng.randint(1, next_id[0])
        if op < 0.4:
            next_id[0] += 1
            values = {"weight": rng.randint(1, 9999) / 100, "carrier": rng.choice(["dhl", "ups", None])}
            names = [c for c in ("weight", "carrier") if c in columns]
            conn.execute(f"INSERT INTO shipments (id, customer{''.join(', ' + c for c in names)}) VALUES "
                         f"(%s, %s{', %s' * len(names)})", (next_id[0], rng.randint(1, 12), *(values[c] for c in names)))
        elif op < 0.7:
            conn.execute("UPDATE shipments SET customer = %s WHERE id = %s", (rng.randint(1, 12), sid))
        else:
            conn.execute("DELETE FROM shipments WHERE id = %s", (sid,))


def test_a_view_failed_by_ddl_is_altered_back_to_active_keeping_its_table(shop, start_service):
    """DDL a view cannot survive fails it, naming ``alter_view``; ``alter_view`` of the failed view makes it
    active again with the new query, its result table kept (same columns: as it was; other columns: altered
    in place), a refused alter leaving it failed with the alter's error."""
    start_service()
    role = "fv_alter_failed_reader"
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CREATE TABLE shipments (id int PRIMARY KEY, customer int, weight numeric(10,2), carrier text)")
        conn.execute("INSERT INTO shipments SELECT g, 1 + g % 12, g * 1.5, (ARRAY['dhl','ups',NULL])[1 + g % 3] "
                     "FROM generate_series(1, 200) g")
        conn.execute("CALL freshview.create_view('public.shipped', 'SELECT customer, COUNT(*) AS n, "
                     "SUM(weight) AS weight, MAX(carrier) AS carrier FROM shipments GROUP BY customer')")
        conn.execute("CREATE INDEX shipped_n ON shipped (n)")
        conn.execute(f"DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN "
                     f"CREATE ROLE {role}; END IF; END$$")
        conn.execute(f"GRANT SELECT ON shipped TO {role}")
        oid = conn.execute("SELECT 'shipped'::regclass::oid").fetchone()[0]
        rng, next_id = random.Random(21), [200]
        conn.execute("ALTER TABLE shipments DROP COLUMN carrier")
        _ship(conn, rng, next_id, 5, "weight")
        status, error = wait_for_status(conn, "public.shipped", "failed")
        assert status == "failed" and "column carrier of public.shipments was dropped" in error, error
        assert "CALL freshview.alter_view('public.shipped', ...)" in error and "drop" not in error.split(";")[-1], error
        with pytest.raises(psycopg.errors.RaiseException, match="nope"):  # refused: still failed, saying why
            conn.execute("CALL freshview.alter_view('public.shipped', 'SELECT customer, nope FROM shipments')")
        status, error = conn.execute("SELECT status, error FROM freshview.views WHERE name = 'public.shipped'").fetchone()
        assert status == "failed" and "nope" in error, error
        # the same columns (names and types): the table kept as it is
        same = ("SELECT customer, COUNT(*) AS n, SUM(weight) AS weight, MAX('x'::text) AS carrier FROM shipments "
                "GROUP BY customer")
        conn.execute("CALL freshview.alter_view('public.shipped', %s)", (same,))
        assert conn.execute("SELECT sql, status, error, phase, altered_at IS NOT NULL FROM freshview.views "
                            "WHERE name = 'public.shipped'").fetchone() == (same, "active", None, None, True)
        wait_until_fresh(shop, ["public.shipped"], timeout=60)  # (its rows: PostgreSQL's answer to the new SQL)
        assert conn.execute(f"SELECT 'shipped'::regclass::oid, to_regclass('shipped_n') IS NOT NULL, "
                            f"has_table_privilege('{role}', 'shipped', 'SELECT')").fetchone() == (oid, True, True)
        _ship(conn, rng, next_id, 30, "weight")
        wait_until_fresh(shop, ["public.shipped"], timeout=60)
        # failed again; a query with other columns: the table altered in place
        conn.execute("ALTER TABLE shipments DROP COLUMN weight")
        _ship(conn, rng, next_id, 5, "")
        assert wait_for_status(conn, "public.shipped", "failed")[0] == "failed"
        other = "SELECT customer, COUNT(*) AS n, AVG(id)::float8 AS mean FROM shipments GROUP BY customer"
        conn.execute("CALL freshview.alter_view('public.shipped', %s)", (other,))
        wait_until_fresh(shop, ["public.shipped"], timeout=60)
        assert [c for c, in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'shipped'::regclass "
                                         "AND attnum > 0 AND NOT attisdropped ORDER BY attnum")] == ["customer", "n", "mean"]
        assert conn.execute(f"SELECT 'shipped'::regclass::oid, to_regclass('shipped_n') IS NOT NULL, "
                            f"has_table_privilege('{role}', 'shipped', 'SELECT')").fetchone() == (oid, True, True)
        _ship(conn, rng, next_id, 30, "")
        wait_until_fresh(shop, ["public.shipped"], timeout=60)
        assert conn.execute("CALL freshview.verify_view('public.shipped')").fetchone()[0].startswith("equal")


def test_an_alter_starts_from_the_state_it_shares_with_the_old_view(shop, start_service, caplog):
    """A HAVING added to a join + aggregate: the new circuit's aggregate is the old one, its state taken as
    pinned with the copies (``runtime.reuse``), not computed again; then an added aggregate: the join is."""
    caplog.set_level(logging.INFO, logger="freshview")
    start_service()
    base = ("SELECT c.region, o.customer, COUNT(*) AS n, SUM(o.amount) AS total FROM orders o JOIN customers c "
            "ON o.customer = c.id WHERE o.status <> 'cancelled' GROUP BY c.region, o.customer")
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view('public.regional', %s)", (base,))
        writer = Writer(shop, 8)
        try:
            time.sleep(0.5)  # (the old view's state made of steps too)
            conn.execute("CALL freshview.alter_view('public.regional', %s)", (base + " HAVING COUNT(*) > 1",))
            assert "aggregate op" in caplog.text.split("state reused from", 1)[1].split("\n", 1)[0]
            wait_until_fresh(shop, ["public.regional"], timeout=60)
            caplog.clear()
            conn.execute("CALL freshview.alter_view('public.regional', %s)", (
                "SELECT c.region, o.customer, COUNT(*) AS n, SUM(o.amount) AS total, MAX(o.amount) AS top "
                "FROM orders o JOIN customers c ON o.customer = c.id WHERE o.status <> 'cancelled' "
                "GROUP BY c.region, o.customer HAVING COUNT(*) > 1",))
            assert "join op" in caplog.text.split("state reused from", 1)[1].split("\n", 1)[0]
        finally:
            writer.finish()
        wait_until_fresh(shop, ["public.regional"], timeout=60)
        rng, next_id = random.Random(12), [7000]
        for _ in range(15):
            random_transaction(conn, rng, next_id)
        wait_until_fresh(shop, ["public.regional"], timeout=60)
