"""Relational kernels: how one executor filters, projects, joins and sums a step's relations.

Each operator in ``runtime.operators`` states its delta rule once, in terms
of the ``Kernels`` protocol below; an executor is one implementation of it:

* ``arrow.ArrowKernels`` ("local") runs in-process on the driver over Arrow
  (expressions by ``runtime.expressions.arrow``, joins and group sums by
  Arrow's Acero): a step of a few hundred rows costs milliseconds.
* ``spark.SparkKernels`` ("spark") builds Spark DataFrames (expressions by
  ``runtime.expressions.spark``): every first computation, and large steps.

The two may differ only in how a kernel runs, never in its result: the
operator tests run every delta rule under both and compare them with a
non-incremental reference.

A relation inside a step (``Rel``) is the kernel set's own handle: an Arrow
table for local kernels, a lazy ``runtime.delta.Delta`` for Spark.  Its
columns are positional, ``c0 .. cN`` then ``_weight`` (int64); ``arrow``
turns any handle into a consolidated Arrow table.  Tables that come from
state (joined slices, partial sums) are always Arrow.

Streamed results (``streams``): a first computation on Spark (``BulkKernels``)
must not collect a whole intermediate result on the driver to write it to
state.  Where an operator's state is empty (a first computation), it asks
such kernels for a result in bounded batches instead: ``stage`` computes a
join side once (on Spark: written to Parquet files by Spark's tasks),
``batches`` reads it in tables of at most ``BulkKernels.BATCH_ROWS`` rows,
which the operator hands to the store's bulk load (``StateStore.load_runs``)
as they come, and ``join_staged`` joins two staged sides where they are (on
Spark, from the files); ``sums_batches`` gives group sums the same way.  The
other kernels implement these by their ordinary kernels (one batch), and
their operators never call them (``streams`` False).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Protocol, Sequence

import pyarrow as pa

from freshview.plan.expr import Expr
from freshview.plan.flatmap import FlatMap

Rel = Any  # the kernel set's relation handle (see the module docstring)


@dataclass(frozen=True)
class Term:
    """One partial result per group.  ``op`` "sum": Σ w (``expr`` None), Σ w over non-NULL ``expr``
    (``sum_type`` None), or Σ CAST(expr AS sum_type)·w over non-NULL ``expr`` (``sum_type`` an Arrow
    type).  ``op`` "min" / "max": the least / greatest non-NULL ``expr`` over the group's rows of any
    weight (binary order; NULL if none), which is not a sum: it says which values the change touched."""

    name: str
    expr: Expr | None = None
    sum_type: pa.DataType | None = None
    op: str = "sum"

    @property
    def type(self) -> pa.DataType:
        if self.op != "sum":
            return self.expr.type.arrow  # type: ignore[union-attr]
        return self.sum_type or pa.int64()


def sums_schema(groups: Sequence[Expr], terms: Sequence[Term]) -> pa.Schema:
    """The columns ``Kernels.sums`` returns: ``g0..`` (the groups' types), ``cnt``, then each term
    (``Term.type``)."""
    fields = [pa.field(f"g{i}", g.type.arrow) for i, g in enumerate(groups)] + [pa.field("cnt", pa.int64())]
    return pa.schema(fields + [pa.field(t.name, t.type) for t in terms])


class Kernels(Protocol):
    name: str  # "local" | "spark"
    streams: bool  # whether operators with empty state take the streamed paths (module docstring)

    def finish(self) -> None:
        """After a computation's last step: release what it left behind (a first computation's files
        handed to Spark, ``BulkKernels``); nothing for the others."""

    def of_arrow(self, table: pa.Table) -> Rel:
        """A relation handle for an Arrow table (columns c0.. and _weight)."""

    def arrow(self, rel: Rel) -> pa.Table:
        """The relation as a consolidated Arrow table (runs any pending work once)."""

    def shared(self, rel: Rel) -> Rel:
        """A handle of ``rel`` that several readers can read while its pending work runs once (an
        Arrow table is already one)."""

    def filter(self, rel: Rel, predicate: Expr, memo: dict) -> Rel:
        """Rows where ``predicate`` is true (NULL is false)."""

    def project(self, rel: Rel, exprs: Sequence[Expr], schema: pa.Schema, memo: dict) -> Rel:
        """``exprs`` as columns c0.. (typed as ``schema``), weights kept."""

    def union(self, rels: Sequence[Rel], schema: pa.Schema) -> Rel:
        """All rows of all ``rels`` (weights add on consolidation)."""

    def reweight(self, rel: Rel, weight: Expr, memo: dict) -> Rel:
        """Each row with its weight multiplied by ``weight`` (a non-NULL integer expression over the
        row); rows whose weight becomes 0 are dropped."""

    def flat_map(self, rel: Rel, node: FlatMap, memo: dict) -> Rel:
        """Each row followed by each of the rows ``node``'s set-returning functions return for it
        (``plan.flatmap``), weights kept."""

    def evaluate(self, rel: Rel, exprs: Sequence[Expr], schema: pa.Schema, memo: dict) -> pa.Table:
        """``exprs`` evaluated per row, named and typed as ``schema`` (which ends in ``_weight``), as
        Arrow, not consolidated: the keyed change of a join side, the values of a MIN/MAX."""

    def join(self, left: pa.Table, right: pa.Table, nkeys: int, schema: pa.Schema, memo: dict) -> Rel:
        """Inner equi-join of two keyed tables (``c*``, ``k0..k{nkeys-1}``, ``_weight``) on their ``k``
        columns (NULL matches nothing; no keys: cross product): the left's ``c*`` then the right's
        ``c*`` renamed to ``schema``'s columns, weight the product of the two weights."""

    def sums(self, rel: Rel, groups: Sequence[Expr], terms: Sequence[Term], memo: dict) -> pa.Table:
        """Per group (columns ``g0..``, NULL a group of its own): ``cnt`` = Σ w and each term.

        Without groups: one row, or none when ``rel`` is empty."""

    # ------------------------------------------------------------------ streamed results (``streams``)
    def stage(self, rel: Rel, exprs: Sequence[Expr], schema: pa.Schema, memo: dict) -> Rel:
        """``evaluate``'s rows as a relation handle that ``batches`` and ``join_staged`` read, computed
        once however often it is read."""

    def batches(self, rel: Rel) -> Iterator[pa.Table]:
        """The relation's rows (not consolidated: weights add up across tables) in tables of bounded size
        (``BulkKernels.BATCH_ROWS``) for a relation computed elsewhere; one table for one on the driver."""

    def join_staged(self, left: Rel, right: Rel, nkeys: int, schema: pa.Schema, memo: dict) -> Rel:
        """``join`` of two ``stage``d relations, where they are."""

    def sums_batches(self, rel: Rel, groups: Sequence[Expr], terms: Sequence[Term], memo: dict
                     ) -> Iterator[pa.Table]:
        """``sums`` in tables of bounded size, each group in exactly one of them."""


__all__ = ["Kernels", "Rel", "Term", "sums_schema"]
