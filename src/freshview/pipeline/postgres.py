"""PostgreSQL result tables as a pipeline sink: the view's table (keys as the service's result tables)
and ``freshview.pipeline_sinks`` (the last emission it holds), written in one transaction."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping

import pyarrow as pa
from psycopg import sql as psql

from freshview.algebra.batch import ipc_bytes
from freshview.pipeline.io import option
from freshview.pipeline.spec import PipelineError

log = logging.getLogger("freshview.pipeline")

_MARKERS = ("CREATE SCHEMA IF NOT EXISTS freshview",
            "CREATE TABLE IF NOT EXISTS freshview.pipeline_sinks (sink text PRIMARY KEY, pipeline text NOT NULL, "
            "seq bigint NOT NULL)")


class PostgresSink:
    def __init__(self, name: str, options: Mapping[str, str], state_dir: Path) -> None:
        self.name = name
        self.what = f"sink {name!r}"
        self.dsn = option(options, "dsn", self.what)
        self.table_name = option(options, "table", self.what)

    def open(self, view: str, columns: Any, plan: Any, pipeline_id: str) -> None:
        import psycopg

        from freshview.connectors.postgres.sink import ResultTable, result_shape

        self.table = ResultTable(self.table_name, result_shape(plan))
        self.key = f"{self.table_name}"
        try:
            self.conn = psycopg.connect(self.dsn)
        except psycopg.Error as exc:
            raise PipelineError(f"{self.what}: cannot connect to PostgreSQL: {exc}") from None
        with self.conn.transaction():
            for statement in _MARKERS:
                self.conn.execute(statement)
            row = self.conn.execute("SELECT pipeline FROM freshview.pipeline_sinks WHERE sink = %s FOR UPDATE",
                                    (self.key,)).fetchone()
            exists = self.conn.execute("SELECT to_regclass(%s) IS NOT NULL", (self.table_name,)).fetchone()[0]
            if row is not None and row[0] == pipeline_id:
                if not exists:
                    raise PipelineError(f"{self.what}: table {self.table_name} was dropped; run the pipeline "
                                        "with a new state directory to fill it again")
                return
            if exists:
                log.info("%s: replacing table %s (written by another pipeline run)", self.what, self.table_name)
                self.conn.execute(psql.SQL("DROP TABLE {}").format(self.table.name))
            for statement in self.table.create_sql():
                self.conn.execute(statement)
            self.conn.execute("INSERT INTO freshview.pipeline_sinks VALUES (%s, %s, 0) ON CONFLICT (sink) DO "
                              "UPDATE SET pipeline = excluded.pipeline, seq = 0", (self.key, pipeline_id))

    def prepare(self, seq: int, change: pa.Table, encode: Callable[[pa.Table], list[dict]]) -> bytes:
        return ipc_bytes(change)

    def deliver(self, seq: int, payload: bytes, recovering: bool) -> None:
        change = pa.ipc.open_stream(payload).read_all()
        with self.conn.transaction():
            held = self.conn.execute("SELECT seq FROM freshview.pipeline_sinks WHERE sink = %s FOR UPDATE",
                                     (self.key,)).fetchone()[0]
            if seq <= held:
                return
            self.table.apply(self.conn, change)
            self.conn.execute("UPDATE freshview.pipeline_sinks SET seq = %s WHERE sink = %s", (seq, self.key))

    def close(self) -> None:
        if getattr(self, "conn", None) is not None:
            self.conn.close()
            self.conn = None
