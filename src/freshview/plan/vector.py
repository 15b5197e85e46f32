"""The vector (k-nearest-neighbour) view as a plan node, and its definition.

``VectorSearch`` reads a documents source and either a queries source (one result set per query
row) or one fixed query vector, and outputs, per query, its ``k`` nearest documents: the queries'
primary-key columns (named as in the queries source; none for a fixed query), ``rank`` (1..k),
the payload columns of the document, and ``distance``.  Its result key is (query key, rank).

A vector view has no SQL: its definition is a ``VectorDefinition``, kept in the flow's catalog as a
view entry of kind ``vector`` (``flow.catalog.ViewEntry``; its JSON: ``to_json``), so the catalog,
resume, checkpoints and ``drop_view`` treat it as any view.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from freshview.errors import CatalogError
from freshview.plan.nodes import Columns, Node, Scan
from freshview.schema import SqlType, TableSchema

METRICS = ("cosine", "l2", "inner_product")
INDEXES = ("hnsw",)
RANK_TYPE = SqlType("int4")
DISTANCE_TYPE = SqlType("float8")


@dataclass(frozen=True)
class VectorSearch(Node):
    """Per query, the ``k`` nearest documents by ``metric`` (see the module docstring).

    Column numbers are positions in the sources' rows: ``vector``, ``payload`` and ``doc_key`` in
    ``docs``; ``query_vector`` and ``query_key`` in ``queries``."""

    docs: Scan
    queries: Scan | None
    vector: int
    query_vector: int | None
    query: tuple[float, ...] | None
    k: int
    metric: str
    payload: tuple[int, ...]
    doc_key: tuple[int, ...]
    query_key: tuple[int, ...]
    index: str | None = None

    def inputs(self) -> tuple[Node, ...]:
        return (self.docs,) + ((self.queries,) if self.queries is not None else ())

    @property
    def dim(self) -> int | None:
        return self.docs.columns[self.vector][1].dim

    @property
    def query_columns(self) -> Columns:
        return tuple(self.queries.columns[i] for i in self.query_key) if self.queries is not None else ()

    @property
    def columns(self) -> Columns:
        payload = tuple(self.docs.columns[i] for i in self.payload)
        return self.query_columns + (("rank", RANK_TYPE),) + payload + (("distance", DISTANCE_TYPE),)

    @property
    def key(self) -> tuple[int, ...]:
        """Output positions of the result key: the query key and rank."""
        return tuple(range(len(self.query_key) + 1))


@dataclass(frozen=True)
class VectorDefinition:
    """What ``register_vector_view`` was given, by name (the catalog's form)."""

    source: str
    vector: str
    k: int
    metric: str = "cosine"
    queries: str | None = None
    query_vector: str | None = None
    query: tuple[float, ...] | None = None
    payload: tuple[str, ...] | None = None
    index: str | None = None

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @staticmethod
    def from_json(data: dict) -> "VectorDefinition":
        data = dict(data)
        for name in ("query", "payload"):
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        return VectorDefinition(**data)


def define(source: str, vector: str, k: int, metric: str = "cosine", queries: str | None = None,
           query: Sequence[float] | None = None, payload: Sequence[str] | None = None,
           query_vector: str | None = None, index: str | None = None) -> VectorDefinition:
    """Check the arguments that need no catalog and return the definition."""
    if (queries is None) == (query is None):
        raise CatalogError("a vector view takes either queries=<source> (a query per row) or "
                           "query=[...] (one fixed vector), not " + ("both" if queries is not None else "neither"))
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise CatalogError(f"k must be a whole number of at least 1, not {k!r}")
    if metric not in METRICS:
        raise CatalogError(f"unknown metric {metric!r}; a vector view measures by {', '.join(METRICS)}")
    if index is not None and index not in INDEXES:
        raise CatalogError(f"unknown index {index!r}; leave it out for exact search, or use {', '.join(INDEXES)}")
    fixed = None
    if query is not None:
        try:
            fixed = tuple(float(x) for x in query)
        except (TypeError, ValueError):
            raise CatalogError("query must be a sequence of numbers (the fixed query vector)") from None
        if not fixed or not all(math.isfinite(x) for x in fixed):
            raise CatalogError("query must be a non-empty vector of finite numbers")
        if metric == "cosine" and not any(fixed):
            raise CatalogError("a zero query vector has no cosine distance")
    if payload is not None and (isinstance(payload, str) or not all(isinstance(p, str) for p in payload)):
        raise CatalogError("payload is a list of column names of the documents' source")
    return VectorDefinition(source, vector, k, metric, queries, query_vector, fixed,
                            tuple(payload) if payload is not None else None, index)


def build(definition: VectorDefinition, source_schema: Callable[[str], TableSchema | None]) -> VectorSearch:
    """The plan of a vector view; ``source_schema(name)`` is a source's schema, None if it is none."""
    docs = _source(definition.source, source_schema, "documents")
    vector = _float_vector(docs, definition.source, definition.vector)
    dim = docs.columns[vector].type.dim
    if not docs.primary_key:
        raise CatalogError(f"source {definition.source!r} needs a primary key: it names each document "
                           "and breaks distance ties")
    payload_names = definition.payload if definition.payload is not None else docs.primary_key
    payload = tuple(_column(docs, definition.source, n) for n in payload_names)
    doc_key = tuple(docs.names.index(k) for k in docs.primary_key)
    queries_scan, query_key, query_vector = None, (), None
    if definition.queries is not None:
        queries = _source(definition.queries, source_schema, "queries")
        if not queries.primary_key:
            raise CatalogError(f"source {definition.queries!r} needs a primary key: it names each query's results")
        query_key = tuple(queries.names.index(k) for k in queries.primary_key)
        name = definition.query_vector
        if name is None:
            floats = [c.name for c in queries.columns if c.type.is_float_vector]
            name = definition.vector if definition.vector in queries.names or len(floats) != 1 else floats[0]
        query_vector = _float_vector(queries, definition.queries, name)
        qdim = queries.columns[query_vector].type.dim
        if dim is not None and qdim is not None and dim != qdim:
            raise CatalogError(f"dimension mismatch: {definition.source}.{definition.vector} holds {dim} values, "
                               f"{definition.queries}.{name} {qdim}")
        queries_scan = _scan(definition.queries, queries)
    elif dim is not None and len(definition.query) != dim:  # type: ignore[arg-type]
        raise CatalogError(f"dimension mismatch: the query vector has {len(definition.query)} values, "  # type: ignore[arg-type]
                           f"{definition.source}.{definition.vector} {dim}")
    node = VectorSearch(_scan(definition.source, docs), queries_scan, vector, query_vector, definition.query,
                        definition.k, definition.metric, payload, doc_key, query_key, definition.index)
    names = [n for n, _ in node.columns]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise CatalogError(f"a vector view's columns would repeat {', '.join(map(repr, clash))} (query key, rank, "
                           "payload, distance); leave such a column out of the payload")
    return node


def _source(name: str, source_schema: Callable[[str], TableSchema | None], what: str) -> TableSchema:
    schema = source_schema(name)
    if schema is None:
        raise CatalogError(f"unknown source {name!r} (the {what} of a vector view are a registered source)")
    return schema


def _scan(name: str, schema: TableSchema) -> Scan:
    return Scan(name, tuple((c.name, c.type) for c in schema.columns))


def _column(schema: TableSchema, source: str, name: str) -> int:
    if name not in schema.names:
        raise CatalogError(f"source {source!r} has no column {name!r} (columns: {', '.join(schema.names)})")
    return schema.names.index(name)


def _float_vector(schema: TableSchema, source: str, name: str) -> int:
    at = _column(schema, source, name)
    kind = schema.columns[at].type
    if not kind.is_float_vector:
        raise CatalogError(f"{source}.{name} is {kind}, not a vector: a vector column is a float array "
                           "such as FLOAT4[384]")
    return at
