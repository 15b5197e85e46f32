"""A throwaway PostgreSQL server for the test suite.

The tests compare freshview's views against PostgreSQL running the same SQL,
so every test run needs a PostgreSQL it fully controls: a fresh cluster in a
temporary directory, listening on 127.0.0.1 on a free port, configured for
logical replication (later connector tests need slots and WAL senders) and
made fast and disposable (``fsync=off``).  We never touch a PostgreSQL that
happens to run on the machine (port 5432): CI machines may not have one, and
tests must not depend on or damage a developer's database.

PostgreSQL refuses to run as root.  When the tests run as root (containers,
CI) the cluster is created and run as the ``postgres`` OS user through
``runuser``, in a directory that user owns.

Set ``FRESHVIEW_TEST_PG_DSN`` to use an existing server instead (opt-in only;
the server must allow creating schemas, and logical replication for the
connector tests).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

from freshview.service.embedded import PostgresError, PostgresServer, find_pg_bindir, free_port  # noqa: F401


@contextlib.contextmanager
def postgres_dsn() -> Iterator[str]:
    """Yield the DSN of a fresh throwaway server (or ``$FRESHVIEW_TEST_PG_DSN``)."""
    external = os.environ.get("FRESHVIEW_TEST_PG_DSN")
    if external:
        yield external
        return
    server = PostgresServer()
    server.start()
    try:
        yield server.dsn
    finally:
        server.stop()
