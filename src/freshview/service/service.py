"""``Service``: the core (``core.Core``) on the connector a DSN names.

``postgresql://…`` and libpq keyword DSNs (``dbname=… host=…``) follow
PostgreSQL through a logical replication slot (``connectors.postgres``);
``mysql://…`` and ``mariadb://…`` follow MySQL/MariaDB's binlog
(``connectors.mysql``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from freshview.connectors.base import Connector
from freshview.connectors.mysql.dsn import is_mysql_dsn
from freshview.service.core import Core, ServiceError, ServiceOptions, SnapshotProgress

__all__ = ["Service", "ServiceError", "ServiceOptions", "SnapshotProgress", "connector_for"]


def connector_for(dsn: str, *, slot: str | None = None, publication: str | None = None) -> Connector:
    if is_mysql_dsn(dsn):
        from freshview.connectors import mysql

        return mysql.connect(dsn)
    from freshview.connectors import postgres

    return postgres.connect(dsn, slot=slot, publication=publication)


class Service(Core):
    """Keeps the views of one database fresh. ``run()`` blocks until ``stop()``."""

    def __init__(self, dsn: str, state_dir: str | Path, *, spark: Any = None,
                 options: ServiceOptions | None = None, snapshot_progress: SnapshotProgress | None = None,
                 slot: str | None = None, publication: str | None = None, metrics: Any = None) -> None:
        self.dsn = dsn
        self.slot = slot
        if not is_mysql_dsn(dsn):  # MySQL has no slot: the position is stored with the results
            from freshview.connectors.postgres.control import slot_name

            self.slot = slot or slot_name(dsn)
        super().__init__(lambda: connector_for(dsn, slot=self.slot, publication=publication), state_dir,
                         spark=spark, options=options, snapshot_progress=snapshot_progress, metrics=metrics)
