"""PartitionedIncrementalFlow: one flow's sources hash-partitioned into shards whose steps run as Spark
tasks on executors, each opening its own shard's state from a location every executor reaches.

    pflow = PartitionedIncrementalFlow(partitions=8, partition_key={"orders": ["o_customer"], "customers": ["c_id"]},
                                       spark=session, state_uri="/shared/freshview/shop")

The coordinator (the driver) keeps the catalog and the step number in ``<state_uri>/coordinator.json``;
shard ``i`` is an ordinary ``IncrementalFlow`` in ``<state_uri>/shard-<i>`` (in-process steps and first
computations: an executor has no Spark of its own).  A tick:

1. converts and consolidates each source's delta, splits it by ``hash(partition key) mod partitions``
   (``algebra.hashing``: equal values of any integer width hash equal, so ``INT`` and ``BIGINT`` keys meet);
2. writes the step's shard deltas to ``<state_uri>/pending/`` (a restarted coordinator finishes it);
3. runs one Spark job with a task per shard that has changes: the task opens its shard, applies the
   delta as the shard's step ``n`` (recording ``n`` and the step's output deltas with the shard's state,
   so a re-run task returns the stored outputs instead of applying twice) and returns its output deltas;
   a failed job is re-run (tasks that finished return what they stored);
4. merges the shards' output deltas per view and publishes the step — ``coordinator.json`` written last,
   then watches — only when every shard finished it.  A step a shard refuses (a delete of a row that is
   not there, a division by zero) is undone on the shards that applied it (their input negated, which
   brings every operator's state back) and raised: no step is ever half-visible.

A view must be computable shard by shard (``partitioning``): joins on the partition keys, GROUP BY and
DISTINCT including them; anything else is refused at ``register_view`` naming the column.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from freshview.algebra import hashing
from freshview.algebra.batch import consolidate, ipc_bytes, negate, repeat_by_weight, to_arrow_delta
from freshview.errors import CatalogError, DeltaError, ExecutionError, FreshviewError, StateError
from freshview.flow.catalog import source_schema_of
from freshview.flow.partitioning import PartitionError, key_positions
from freshview.flow.watches import Watch, Watches
from freshview.runtime import shipping
from freshview.schema import WEIGHT, TableSchema
from freshview.sql import build_plan

FORMAT = 1
ATTEMPTS = 3  # a Spark job that failed (a lost executor) is run again this many times in all


@dataclass
class PartitionedStep:
    """What one partitioned tick did."""

    step: int
    rows_in: int
    rows_out: int
    duration_ms: float
    shards_run: int
    attempts: int = 1

    def __str__(self) -> str:
        return (f"step {self.step}: {self.rows_in} rows in, {self.rows_out} rows out on {self.shards_run} shards, "
                f"{self.duration_ms:.0f} ms")


# ----------------------------------------------------------------------------- shard side (executors)
def _table(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def _open_shard(directory: str, catalog: Mapping[str, Any], prune: bool = False):
    """The shard's flow, its catalog brought to the coordinator's (idempotent); with ``prune`` also
    without the sources the coordinator dropped."""
    from freshview.flow.flow import IncrementalFlow

    flow = IncrementalFlow(state_dir=directory, execution="local", first_computation="local")
    try:
        for name, schema in catalog["sources"].items():
            flow.register_source(name, TableSchema.from_json(schema))
        wanted = [v for v, _ in catalog["views"]]
        for name in reversed(flow.views):
            if name not in wanted:
                flow.drop_view(name)
        if prune:
            for name in flow.sources:
                if name not in catalog["sources"]:
                    flow.drop_source(name)
        flow.register_views([(v, sql) for v, sql in catalog["views"]])
    except BaseException:
        flow.close()
        raise
    return flow


def shard_task(item: tuple) -> tuple[int, str, Any]:
    """One shard's part of a step, on an executor: ``(index, "ok", {view: ipc})`` or ``(index, "error",
    (kind, message))`` for a step the shard refuses (rolled back there).  Applying step ``n`` twice
    returns the outputs stored the first time; ``undo`` negates a step the shard applied."""
    index, directory, catalog, step, deltas, undo = item
    flow = _open_shard(directory, catalog, prune=True)
    try:
        done = flow.get_meta("partition/step", 0)
        outdir = Path(directory) / "outputs"
        if undo:
            if done != step:
                return index, "ok", {}
            changes = {s: negate(_table(d)) for s, d in deltas.items()}
            with flow.prepare(changes) as undone:
                undone.set_meta("partition/step", flow.get_meta("partition/previous", 0))
                undone.commit()
            return index, "ok", {}
        if done >= step:
            stored = outdir / str(step)
            return index, "ok", {p.stem: p.read_bytes() for p in stored.glob("*.arrow")} if stored.exists() else {}
        if outdir.exists():
            shutil.rmtree(outdir)
        produced: dict[str, bytes] = {}
        try:
            prepared = flow.prepare({s: _table(d) for s, d in deltas.items()})
        except FreshviewError as exc:
            return index, "error", (type(exc).__name__, str(exc))
        with prepared:  # the outputs kept for a re-run, then the step and its number commit together
            target = outdir / str(step)
            target.mkdir(parents=True, exist_ok=True)
            for view, out in prepared.outputs.items():
                produced[view] = data = ipc_bytes(out)
                (target / f"{view}.arrow").write_bytes(data)
            prepared.set_meta("partition/previous", done)
            prepared.set_meta("partition/step", step)
            prepared.commit()
        return index, "ok", produced
    finally:
        flow.close()


def _shard_snapshot(item: tuple) -> tuple[int, dict[str, bytes]]:
    index, directory, catalog, names = item
    flow = _open_shard(directory, catalog)
    try:
        return index, {n: ipc_bytes(flow.snapshot(n, weighted=True)) for n in names}
    finally:
        flow.close()


# ----------------------------------------------------------------------------- coordinator (driver)
def partition_of(table: pa.Table, key_columns: Sequence[int], partitions: int) -> np.ndarray:
    """Each row's shard: the row hash of its partition key columns, mod ``partitions``."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    h = hashing.hash_rows([table.column(i) for i in key_columns])
    return (h % np.uint64(partitions)).astype(np.int64)


class PartitionedIncrementalFlow:
    """``IncrementalFlow``'s API over ``partitions`` shards stepped on Spark executors (module docstring)."""

    def __init__(self, partitions: int, partition_key: Mapping[str, Sequence[str]], spark: Any = None,
                 state_uri: str | Path | None = None) -> None:
        if not isinstance(partitions, int) or partitions < 1:
            raise FreshviewError(f"partitions must be a positive integer, not {partitions!r}")
        if state_uri is None:
            raise FreshviewError("a partitioned flow needs state_uri: a directory every executor can reach")
        uri = str(state_uri)
        if "://" in uri and not uri.startswith("file://"):
            raise FreshviewError(f"state_uri {uri!r}: shards keep live state in a file system every executor "
                                 "mounts (a local or shared path); checkpoint to object storage instead")
        self.root = Path(uri[len("file://"):] if uri.startswith("file://") else uri)
        self.root.mkdir(parents=True, exist_ok=True)
        self._spark = spark
        self._spark_ready = False
        self._lock = threading.RLock()
        self._watches = Watches()
        self._closed = False
        doc = self._read()
        keys = {s: [c.lower() for c in cols] for s, cols in partition_key.items()}
        if doc is None:
            self.partitions, self.partition_key = partitions, keys
            self._sources: dict[str, TableSchema] = {}
            self._views: list[tuple[str, str]] = []
            self._step = 0
            self._plans: dict[str, Any] = {}
            self._write()
        else:
            if doc.get("format") != FORMAT:
                raise StateError(f"{self.root} holds a partitioned flow of an unknown format")
            if doc["partitions"] != partitions:
                raise StateError(f"{self.root} holds {doc['partitions']} partitions, not {partitions}: "
                                 "repartitioning needs a new state_uri")
            self.partitions = partitions
            self.partition_key = {**doc["partition_key"], **keys}
            self._sources = {n: TableSchema.from_json(s) for n, s in doc["sources"].items()}
            self._views = [tuple(v) for v in doc["views"]]  # type: ignore[misc]
            self._step = doc["step"]
            self._plans = {}
            for name, sql in self._views:
                self._plans[name] = build_plan(sql, self)
            self._finish_pending()

    # ---------------------------------------------------------------- persistence
    def _read(self) -> dict | None:
        try:
            return json.loads((self.root / "coordinator.json").read_text())
        except FileNotFoundError:
            return None

    def _catalog(self) -> dict:
        return {"sources": {n: s.to_json() for n, s in self._sources.items()}, "views": [list(v) for v in self._views]}

    def _write(self) -> None:
        doc = {"format": FORMAT, "partitions": self.partitions, "partition_key": self.partition_key,
               "step": self._step, **self._catalog()}
        tmp = self.root / ".coordinator.json.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.root / "coordinator.json")

    def _shard_dir(self, index: int) -> str:
        return str(self.root / f"shard-{index:04d}")

    # ---------------------------------------------------------------- Spark
    @property
    def spark(self) -> Any:
        """The session the shards' tasks run on; on a cluster, freshview is shipped to its executors and
        checked there first (``runtime.shipping``: ``ExecutorEnvironmentError`` says what to install where)."""
        if not self._spark_ready:
            session = self._spark
            if session is None:
                from freshview.runtime.spark import get_session

                session = get_session()
            if type(session).__module__.startswith("pyspark.sql.connect"):
                raise FreshviewError("a partitioned flow runs its shards as tasks of a SparkContext, which a Spark "
                                     "Connect session does not have: pass a classic SparkSession (SparkSession."
                                     "builder.master('spark://...').getOrCreate())")
            shipping.ship(session)
            self._spark, self._spark_ready = session, True
        return self._spark

    def _run(self, fn, items: list[tuple]) -> tuple[list, int]:
        """Run ``fn`` over ``items``, a task each, on the executors; a failed job runs again."""
        if not items:
            return [], 0
        sc = self.spark.sparkContext
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return sc.parallelize(items, len(items)).map(fn).collect(), attempt
            except Exception as exc:  # py4j / Spark job failures: a lost executor, a killed worker
                if attempt == ATTEMPTS:
                    raise ExecutionError(f"a partitioned step failed {ATTEMPTS} times on Spark: "
                                         f"{_first_line(exc)}") from None
                time.sleep(0.5 * attempt)
        raise AssertionError("unreachable")

    # ---------------------------------------------------------------- catalog
    def relation_columns(self, name: str):
        """Catalog protocol for the SQL front end."""
        if name in self._sources:
            return tuple((c.name, c.type) for c in self._sources[name].columns), False
        if name in self._plans:
            return self._plans[name].columns, True
        return None

    @property
    def sources(self) -> list[str]:
        return list(self._sources)

    @property
    def views(self) -> list[str]:
        return [v for v, _ in self._views]

    @property
    def step(self) -> int:
        return self._step

    def source_schema(self, name: str) -> TableSchema:
        if name not in self._sources:
            raise CatalogError(f"unknown source {name!r}")
        return self._sources[name]

    def view_columns(self, name: str):
        if name not in self._plans:
            raise CatalogError(f"unknown view {name!r}")
        return self._plans[name].columns

    def readers(self, name: str) -> list[str]:
        """Views that read the source or view ``name`` directly, in registration order."""
        return [v for v, _ in self._views if v != name and any(s.relation == name for s in _scans(self._plans[v]))]

    def drop_source(self, name: str) -> None:
        """Forget a source on the coordinator and every shard (refused while a view reads it)."""
        with self._lock:
            self._check_open()
            self.source_schema(name)
            users = self.readers(name)
            if users:
                raise CatalogError(f"cannot drop source {name!r}: views {', '.join(users)} read it")
            del self._sources[name]
            self._write()
            self._sync()

    def register_source(self, name: str, schema: str | pa.Schema | TableSchema,
                        primary_key: Sequence[str] | None = None) -> None:
        with self._lock:
            self._check_open()
            parsed = source_schema_of(schema, primary_key)
            key = self.partition_key.get(name)
            if not key:
                raise PartitionError(f"source {name!r} has no partition key: give it in partition_key")
            missing = [k for k in key if k not in parsed.names]
            if missing:
                raise PartitionError(f"source {name!r} has no column {missing[0]!r} (its partition key)")
            if name in self._sources:
                if self._sources[name] == parsed:
                    return
                raise CatalogError(f"source {name!r} is already registered with a different schema")
            if name in self._plans:
                raise CatalogError(f"{name!r} is already a view")
            self._sources[name] = parsed
            self._write()

    def register_view(self, name: str, sql: str) -> None:
        self.register_views([(name, sql)])

    def register_views(self, views: Sequence[tuple[str, str]]) -> None:
        """Compile and check each view (shard by shard, or ``PartitionError`` naming the column), then
        compute it on every shard (one Spark job)."""
        with self._lock:
            self._check_open()
            known = dict(self._views)
            new: list[tuple[str, str]] = []
            added: list[str] = []
            try:
                for name, sql in views:
                    if name in known:
                        if known[name] == sql:
                            continue
                        raise CatalogError(f"view {name!r} already exists with a different definition; drop_view it first")
                    if name in self._sources:
                        raise CatalogError(f"{name!r} is already a source")
                    plan = build_plan(sql, self)
                    try:
                        key_positions(plan, self.partition_key, self._view_keys())
                    except PartitionError as exc:
                        raise PartitionError(f"view {name!r}: {exc}") from None
                    self._plans[name] = plan
                    added.append(name)
                    new.append((name, sql))
                if not new:
                    return
                self._views.extend(new)
                self._sync()
            except BaseException:
                for name in added:
                    self._plans.pop(name, None)
                self._views = [v for v in self._views if v[0] not in added]
                raise
            self._write()

    def _view_keys(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, _ in self._views:
            if name in self._plans:
                out[name] = key_positions(self._plans[name], self.partition_key, out)
        return out

    def drop_view(self, name: str) -> None:
        with self._lock:
            self._check_open()
            if name not in self._plans:
                raise CatalogError(f"unknown view {name!r}")
            readers = self.readers(name)
            if readers:
                raise CatalogError(f"cannot drop view {name!r}: views {', '.join(readers)} read it")
            self._views = [v for v in self._views if v[0] != name]
            del self._plans[name]
            self._write()
            self._sync()

    def _sync(self) -> None:
        """Every shard's catalog brought to the coordinator's (views computed where new)."""
        catalog = self._catalog()
        items = [(i, self._shard_dir(i), catalog, self._step, {}, False) for i in range(self.partitions)]
        results, _ = self._run(shard_task, items)
        for _index, status, detail in results:
            if status == "error":
                raise ExecutionError(f"a shard refused the catalog: {detail[1]}")

    # ---------------------------------------------------------------- ticks
    def tick(self, source: str | Mapping[str, Any], delta: Any = None) -> PartitionedStep:
        """One atomic step over every shard: ``tick("orders", delta)`` or ``tick({"a": d1, "b": d2})``."""
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            changes = {source: delta} if isinstance(source, str) else dict(source)
            if isinstance(source, str) and delta is None:
                raise DeltaError("tick(source, delta) needs a delta")
            per_shard: dict[int, dict[str, bytes]] = {}
            rows_in = 0
            for name, data in changes.items():
                schema = self.source_schema(name)
                table = consolidate(to_arrow_delta(data, schema.arrow(with_weight=True)))
                rows_in += table.num_rows
                shard = partition_of(table, [schema.names.index(k) for k in self.partition_key[name]],
                                     self.partitions)
                for i in np.unique(shard):
                    part = table.filter(pa.array(shard == i))
                    per_shard.setdefault(int(i), {})[name] = ipc_bytes(part)
            step = self._step + 1
            self._write_pending(step, per_shard)
            outputs, attempts = self._apply(step, per_shard)
            self._step = step
            self._write()
            self._clear_pending()
            self._publish(outputs, step)
            return PartitionedStep(step, rows_in, sum(t.num_rows for t in outputs.values()),
                                   (time.perf_counter() - started) * 1000, len(per_shard), attempts)

    def _apply(self, step: int, per_shard: dict[int, dict[str, bytes]]) -> tuple[dict[str, pa.Table], int]:
        catalog = self._catalog()
        items = [(i, self._shard_dir(i), catalog, step, d, False) for i, d in sorted(per_shard.items())]
        results, attempts = self._run(shard_task, items)
        refused = [r for r in results if r[1] == "error"]
        if refused:
            applied = [i for i, status, _ in results if status == "ok"]
            undo = [(i, self._shard_dir(i), catalog, step, per_shard[i], True) for i in applied]
            self._run(shard_task, undo)
            self._clear_pending()
            kind, message = refused[0][2]
            error = {"DeltaError": DeltaError, "CatalogError": CatalogError}.get(kind, ExecutionError)
            raise error(f"shard {refused[0][0]}: {message}")
        merged: dict[str, list[pa.Table]] = {}
        for _index, _status, outs in results:
            for view, data in outs.items():
                merged.setdefault(view, []).append(_table(data))
        return {v: consolidate(pa.concat_tables(ts)) for v, ts in merged.items()}, attempts

    def _write_pending(self, step: int, per_shard: dict[int, dict[str, bytes]]) -> None:
        pending = self.root / "pending"
        if pending.exists():
            shutil.rmtree(pending)
        staging = self.root / ".pending.tmp"
        if staging.exists():
            shutil.rmtree(staging)
        for i, deltas in per_shard.items():
            for name, data in deltas.items():
                (staging / str(i)).mkdir(parents=True, exist_ok=True)
                (staging / str(i) / f"{name}.arrow").write_bytes(data)
        staging.mkdir(exist_ok=True)
        (staging / "STEP").write_text(str(step))
        os.replace(staging, pending)

    def _clear_pending(self) -> None:
        shutil.rmtree(self.root / "pending", ignore_errors=True)

    def _finish_pending(self) -> None:
        """A step the coordinator dispatched but did not publish (it stopped): finish it."""
        pending = self.root / "pending"
        if not (pending / "STEP").exists():
            return
        step = int((pending / "STEP").read_text())
        if step != self._step + 1:
            self._clear_pending()
            return
        per_shard = {int(d.name): {p.stem: p.read_bytes() for p in d.glob("*.arrow")}
                     for d in pending.iterdir() if d.is_dir()}
        self._apply(step, per_shard)
        self._step = step
        self._write()
        self._clear_pending()

    def _publish(self, outputs: dict[str, pa.Table], step: int) -> None:
        self._watches.publish(outputs, step)

    # ---------------------------------------------------------------- reading
    def snapshot(self, name: str, weighted: bool = False) -> pa.Table:
        """A view's (or source's) rows: the union of the shards' (one Spark job)."""
        with self._lock:
            self._check_open()
            if name in self._plans:
                columns = self._plans[name].columns
            elif name in self._sources:
                columns = tuple((c.name, c.type) for c in self._sources[name].columns)
            else:
                raise CatalogError(f"unknown view {name!r}")
            catalog = self._catalog()
            items = [(i, self._shard_dir(i), catalog, [name]) for i in range(self.partitions)]
            results, _ = self._run(_shard_snapshot, items)
            parts = [_table(out[name]) for _i, out in results]
            schema = pa.schema([pa.field(n, t.arrow) for n, t in columns] + [pa.field(WEIGHT, pa.int64())])
            table = consolidate(pa.concat_tables([p.cast(schema) for p in parts])) if parts else schema.empty_table()
            if weighted:
                return table
            return repeat_by_weight(table).drop_columns([WEIGHT])

    def watch_output(self, name: str, timeout: float | None = None):
        """Subscribe to a view's merged changes from the next step on (``flow.Watch``)."""
        with self._lock:
            if name not in self._plans:
                raise CatalogError(f"unknown view {name!r}")
            return self._watches.add(Watch(self._watches, name, timeout))

    def explain(self, name: str) -> str:
        with self._lock:
            if name not in self._plans:
                raise CatalogError(f"unknown view {name!r}")
            keys = self._view_keys()
            cols = [n for n, _ in self._plans[name].columns]
            carried = keys.get(name)
            where = ", ".join(cols[p] for p in carried) if carried else "not carried (row-by-row view)"
            shard = _open_shard(self._shard_dir(0), self._catalog())
            try:
                inner = shard.explain(name)
            finally:
                shard.close()
            return "\n".join([
                f"partitioned view {name}: {self.partitions} shards by "
                + "; ".join(f"{s}({', '.join(k)})" for s, k in self.partition_key.items() if s in self._sources),
                f"partition key in the view's rows: {where}",
                "each shard (shard 0 shown):", inner])

    # ---------------------------------------------------------------- checkpoints
    def checkpoint(self, uri: str) -> list:
        """A delta checkpoint of every shard (``<uri>/shard-<i>/``) and the coordinator's document."""
        return self._checkpoint(uri, full=False)

    def checkpoint_full(self, uri: str) -> list:
        return self._checkpoint(uri, full=True)

    def _checkpoint(self, uri: str, full: bool) -> list:
        from freshview.flow import checkpoint as ckpt

        with self._lock:
            self._check_open()
            infos = []
            for i in range(self.partitions):
                shard = _open_shard(self._shard_dir(i), self._catalog())
                try:
                    infos.append(shard.checkpoint_full(_join(uri, f"shard-{i:04d}")) if full
                                 else shard.checkpoint(_join(uri, f"shard-{i:04d}")))
                finally:
                    shard.close()
            ckpt.write_document(_join(uri, "coordinator.json"), (self.root / "coordinator.json").read_bytes())
            return infos

    def restore(self, uri: str) -> None:
        """Every shard and the coordinator from the last checkpoint at ``uri``."""
        from freshview.flow import checkpoint as ckpt

        with self._lock:
            self._check_open()
            doc = json.loads(ckpt.read_document(_join(uri, "coordinator.json")))
            if doc.get("partitions") != self.partitions:
                raise StateError(f"the checkpoint at {uri} has {doc.get('partitions')} partitions, not "
                                 f"{self.partitions}")
            for i in range(self.partitions):
                shard = _open_shard(self._shard_dir(i), {"sources": {}, "views": []})
                try:
                    shard.restore(_join(uri, f"shard-{i:04d}"))
                finally:
                    shard.close()
            self._sources = {n: TableSchema.from_json(s) for n, s in doc["sources"].items()}
            self._views = [tuple(v) for v in doc["views"]]  # type: ignore[misc]
            self._plans = {}
            for name, sql in self._views:
                self._plans[name] = build_plan(sql, self)
            self._step = doc["step"]
            self._clear_pending()
            self._write()

    # ---------------------------------------------------------------- life
    def _check_open(self) -> None:
        if self._closed:
            raise FreshviewError("this PartitionedIncrementalFlow is closed")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._watches.close()

    def __enter__(self) -> "PartitionedIncrementalFlow":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _scans(node) -> Iterator[Any]:
    from freshview.plan import nodes as pn

    if isinstance(node, pn.Scan):
        yield node
    for child in node.inputs():
        yield from _scans(child)


def _join(uri: str, part: str) -> str:
    return uri.rstrip("/") + "/" + part


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    for line in text:  # the Python error a task raised, if Spark passed it on
        if "Error:" in line and "py4j" not in line:
            return line.strip()
    return text[0] if text else type(exc).__name__
