"""MariaDB: a result table changed by hand so that it refuses rows stops its view alone (``sink error``, the
database's message); the other views go on, and the view is rebuilt after ``sink_retry_s``.  A step's
statements go to MariaDB in one packet, so which table refused is found by trying each alone
(``sink._refusing``)."""

from __future__ import annotations

import time

from freshview.service.service import ServiceOptions
from tests.service.test_mysql_service import (  # noqa: F401 - fixtures
    connect, create_views, shop, start_service, wait_until_fresh,
)

TOTALS = "SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY customer"
PLAIN = "SELECT id, customer, amount FROM orders WHERE amount > 10"


def _status(args: dict, name: str, want: str, timeout: float = 60.0) -> tuple:
    deadline = time.monotonic() + timeout
    with connect(args, autocommit=True) as conn, conn.cursor() as cur:
        while True:
            cur.execute("SELECT status, error FROM freshview.views WHERE name = %s", (f"{args['database']}.{name}",))
            row = cur.fetchone()
            if row and row[0] == want:
                return row
            assert time.monotonic() < deadline, f"{name} is not {want}: {row}"
            time.sleep(0.1)


def test_a_result_table_that_refuses_rows_stops_its_view_alone_on_mariadb(shop, start_service):
    service = start_service(options=ServiceOptions(poll_s=0.05, sink_retry_s=2.0))
    create_views(shop, {"totals": TOTALS, "plain": PLAIN})
    wait_until_fresh(shop, ["totals", "plain"])
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"ALTER TABLE `{shop['database']}`.totals ADD CONSTRAINT few CHECK (n < 100)")
        cur.execute("START TRANSACTION")
        cur.executemany("INSERT INTO orders VALUES (%s, 1, 50.5, 'paid', NULL)", [(i,) for i in range(5000, 5150)])
        cur.execute("COMMIT")
        status, error = _status(shop, "totals", "sink error")
        assert f"the result table {shop['database']}.totals refused a step's rows" in error and "few" in error, error
        wait_until_fresh(shop, ["plain"])  # the step went on without it
        cur.execute("UPDATE orders SET amount = 77 WHERE id = 5000")
        wait_until_fresh(shop, ["plain"])
        _status(shop, "totals", "active")  # rebuilt into a new table, without the constraint
        wait_until_fresh(shop, ["totals", "plain"])
        cur.execute("DELETE FROM orders WHERE id BETWEEN 5000 AND 5010")
        wait_until_fresh(shop, ["totals", "plain"])
    assert service.error is None
