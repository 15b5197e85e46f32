"""The vector view's operator: per query, its k nearest documents, maintained under changes.

State.  The documents and queries are the flow's copies of the two sources (``source/<name>``,
applied before any view steps, so they hold this step's rows); the operator keeps, in its own
arrangement ``top`` (keyed by the query key), each query's current result rows plus the
documents' primary keys.  In memory it keeps the documents' vectors as a float32 matrix (one slot
per document, slots reused), the queries' vectors likewise, each query's top-k (document keys
and distances) and the inverse map.  The memory is a cache of the store: a token written to the store's metadata with
every step says which state it mirrors; a step that finds another token (a restart, a rolled-back
step, a checkpoint restored) rebuilds it from the store first.

Delta rule, per step (``knn`` holds every decision):

* a query inserted, updated (its vector) or deleted: deleted queries lose their rows; new and
  changed ones compute their top-k against all documents (screened by one matrix product, the
  candidates measured exactly: O(N·d) each);
* documents touched (inserted, updated or deleted): a query one of whose current k nearest was
  touched recomputes its top-k (``knn.needs_recompute``'s rule, found through an inverse map
  document → queries holding it); every other query compares only the touched documents' new
  versions (O(changes × queries) by one matrix product against each query's k-th score, kept per
  query) and merges those that come within it (``knn.admitted``, ``knn.merge``);
* the output is −old rows, +new rows of the queries whose result changed (consolidated: an
  unchanged row cancels).

``index="hnsw"``: a full recompute asks an HNSW graph (hnswlib, kept in memory beside the matrix,
rebuilt from the store after a restart) for 2k candidates and measures those exactly, instead of
screening every document; everything else is as above (a touched document is still compared with
every query exactly).  The result is then approximate: a recompute may miss a true neighbour the
graph does not find (``benchmarks/vector.py --hnsw`` measures the recall).

The operator runs in-process on numpy under either executor.  NULL vectors, and vectors that
cannot be measured (``knn.usable``), are ignored: such a document is in no result, such a query
has none.  A vector of the wrong length (a ``FLOAT4[]`` column without a declared dimension) fails
the step, naming the row's key.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Hashable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import consolidate, negate
from freshview.circuit import arrangements
from freshview.circuit.nodes import VectorState
from freshview.errors import DeltaError, ExecutionError
from freshview.plan.vector import VectorSearch
from freshview.runtime.operators import knn
from freshview.runtime.relation import col_name
from freshview.runtime.state.layout import Layout
from freshview.schema import WEIGHT

_QUERY_BATCH = 64  # queries screened per matrix product in a full recompute


def vectors_of(arr: pa.Array | pa.ChunkedArray, dim: int | None) -> tuple[np.ndarray, np.ndarray]:
    """A list column as (n × dim float32 with NaN rows for NULL, lengths with -1 for NULL); ``dim``
    None takes the first non-NULL length.  Rows whose length differs from ``dim`` are left NaN."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], arr.type)
    lengths = np.asarray(pc.fill_null(pc.list_value_length(arr), -1), dtype=np.int64)
    if dim is None:
        present = lengths[lengths >= 0]
        dim = int(present[0]) if len(present) else 0
    out = np.full((len(arr), dim), np.nan, dtype=np.float32)
    flat = np.asarray(pc.list_flatten(arr).cast(pa.float32()).to_numpy(zero_copy_only=False), dtype=np.float32)
    starts = np.concatenate([[0], np.cumsum(np.maximum(lengths, 0))[:-1]]) if len(lengths) else lengths
    good = np.flatnonzero(lengths == dim)
    if len(good) and dim:
        idx = starts[good][:, None] + np.arange(dim)[None, :]
        out[good] = flat[idx]
    return out, lengths


class _Vectors:
    """Rows by key in a growable float32 matrix: a slot per key, freed slots reused first, so slots
    ``[0, n)`` are the ones in use or free (``live`` marks usable vectors)."""

    def __init__(self, dim: int, metric: str) -> None:
        self.dim, self.metric = dim, metric
        self.matrix = np.zeros((0, dim), np.float32)
        self.sq = np.zeros(0, np.float64)
        self.live = np.zeros(0, bool)  # the slot holds a usable vector
        self.keys: list[Hashable | None] = []
        self.slot: dict[Hashable, int] = {}
        self.free: list[int] = []
        self.n = 0  # slots handed out so far
        self.max_sq = 0.0  # at least every live squared norm (never lowered: a bound for error margins)
        # queries only: per slot, the k-th nearest document's score (inf while fewer than k) and
        # whether it holds k documents (``_Cache.set_top`` keeps them)
        self.kth = np.zeros(0, np.float64)
        self.full = np.zeros(0, bool)

    def ensure_dim(self, dim: int) -> None:
        """Fix the width once the first vector is seen (a column without a declared dimension)."""
        if self.dim == 0 and dim:
            self.dim = dim
            self.matrix = np.zeros((len(self.live), dim), np.float32)

    def remove(self, keys: list[Hashable]) -> None:
        for key in keys:
            s = self.slot.pop(key, None)
            if s is not None:
                self.live[s] = False
                self.keys[s] = None
                self.free.append(s)

    def put(self, keys: list[Hashable], vectors: np.ndarray) -> None:
        """Insert or replace; an unusable vector keeps the key but no live vector."""
        self.remove([k for k in keys if k in self.slot])
        reuse = [self.free.pop() for _ in range(min(len(keys), len(self.free)))]
        fresh = len(keys) - len(reuse)
        if self.n + fresh > len(self.live):
            grow = max(self.n + fresh, 2 * len(self.live)) - len(self.live)
            self.matrix = np.concatenate([self.matrix, np.zeros((grow, self.dim), np.float32)])
            self.sq = np.concatenate([self.sq, np.zeros(grow)])
            self.live = np.concatenate([self.live, np.zeros(grow, bool)])
            self.kth = np.concatenate([self.kth, np.full(grow, np.inf)])
            self.full = np.concatenate([self.full, np.zeros(grow, bool)])
            self.keys.extend([None] * grow)
        slots = np.array(reuse + list(range(self.n, self.n + fresh)), dtype=np.int64)
        self.n += fresh
        ok = knn.usable(vectors, self.metric) if len(keys) else np.zeros(0, bool)
        self.matrix[slots] = np.where(ok[:, None], vectors, 0)
        self.sq[slots] = knn.squared_norms(self.matrix[slots])
        self.live[slots] = ok
        self.kth[slots], self.full[slots] = np.inf, False
        if ok.any():
            self.max_sq = max(self.max_sq, float(self.sq[slots][ok].max()))
        for key, s in zip(keys, slots.tolist()):
            self.keys[s] = key
            self.slot[key] = s

    def vector(self, key: Hashable) -> np.ndarray | None:
        s = self.slot.get(key)
        return None if s is None or not self.live[s] else self.matrix[s]

    def key_of(self, slot: int) -> Hashable:
        return self.keys[slot]


class _Hnsw:
    """An HNSW graph (hnswlib) over the documents' live slots (labels are slots), for ``index="hnsw"``."""

    SPACES = {"cosine": "cosine", "l2": "l2", "inner_product": "ip"}
    M, EF_CONSTRUCTION, EF_SEARCH = 16, 100, 128

    def __init__(self, dim: int, metric: str) -> None:
        try:
            import hnswlib
        except ImportError:
            raise ExecutionError("index='hnsw' needs the hnswlib package: pip install hnswlib "
                                 "(or pip install freshview[vector])") from None
        self.index = hnswlib.Index(space=self.SPACES[metric], dim=dim)
        self.index.init_index(max_elements=1024, ef_construction=self.EF_CONSTRUCTION, M=self.M, random_seed=7)
        self.present = np.zeros(0, bool)  # per slot: in the graph and not deleted

    def update(self, rows: "_Vectors", slots: np.ndarray) -> None:
        """Bring ``slots`` up to date: live vectors added (or replaced), the others deleted."""
        if len(self.present) < len(rows.live):
            self.present = np.concatenate([self.present, np.zeros(len(rows.live) - len(self.present), bool)])
        slots = np.unique(np.asarray(slots, np.int64))
        gone = slots[self.present[slots] & ~rows.live[slots]]
        for s in gone.tolist():
            self.index.mark_deleted(s)
        self.present[gone] = False
        add = slots[rows.live[slots]]
        if len(add):
            need = self.index.element_count + len(add)
            if need > self.index.max_elements:
                self.index.resize_index(max(need, 2 * self.index.max_elements))
            self.index.add_items(rows.matrix[add], add, num_threads=-1 if len(add) > 10_000 else 1)
            self.present[add] = True

    def candidates(self, queries: np.ndarray, k: int) -> list[np.ndarray]:
        """Up to ``k`` approximate nearest slots per query."""
        live = int(self.present.sum())
        k = min(k, live)
        if k == 0:
            return [np.zeros(0, np.int64) for _ in range(len(queries))]
        self.index.set_ef(max(self.EF_SEARCH, k))
        labels, _ = self.index.knn_query(queries, k=k, num_threads=1)
        return [row.astype(np.int64) for row in labels]


@dataclass
class _Cache:
    token: str | None
    docs: _Vectors
    queries: _Vectors
    tops: dict[Hashable, tuple[list[Hashable], np.ndarray]] = field(default_factory=dict)
    holders: dict[Hashable, set] = field(default_factory=dict)  # document key -> queries whose top-k holds it
    hnsw: _Hnsw | None = None

    def set_top(self, q: Hashable, top: tuple[list[Hashable], np.ndarray] | None, k: int, metric: str) -> None:
        """Replace query ``q``'s top-k (None: the query is gone), keeping ``holders`` and the
        queries' per-slot k-th score and fullness."""
        old = self.tops.pop(q, None)
        if old is not None:
            for d in old[0]:
                held = self.holders.get(d)
                if held is not None:
                    held.discard(q)
                    if not held:
                        del self.holders[d]
        if top is None:
            return
        self.tops[q] = top
        for d in top[0]:
            self.holders.setdefault(d, set()).add(q)
        slot = self.queries.slot.get(q)
        if slot is not None:
            self.queries.full[slot] = len(top[0]) >= k
            self.queries.kth[slot] = knn.to_score(top[1][-1], metric) if len(top[0]) >= k else np.inf


class VectorTopK:
    """One vector view's operator (see the module docstring)."""

    def __init__(self, node: VectorSearch, states: VectorState, view: str) -> None:
        self.node, self.states, self.view = node, states, view
        self.nq = len(node.query_key)
        self.width = len(node.columns)
        self.doc_key_cols = [col_name(i) for i in node.doc_key]
        self.key_cols = [f"k{i}" for i in range(len(node.doc_key))]
        self.token_key = arrangements.vector_token(states.top)
        self._cache: _Cache | None = None
        self._fixed = np.asarray(node.query, np.float32) if node.query is not None else None

    # ------------------------------------------------------------------ layout
    def top_layout(self, docs_schema: pa.Schema) -> Layout:
        out = [pa.field(col_name(i), t.arrow) for i, (_, t) in enumerate(self.node.columns)]
        keys = [pa.field(k, docs_schema.field(c).type) for k, c in zip(self.key_cols, self.doc_key_cols)]
        return Layout(pa.schema(out + keys), tuple(col_name(i) for i in range(self.nq)))

    # ------------------------------------------------------------------ step
    def step(self, store: Any, docs: pa.Table | None, queries: pa.Table | None, force: bool) -> pa.Table | None:
        """This step's output delta (output columns + ``_weight``), or None if nothing changed."""
        if not force and (docs is None or docs.num_rows == 0) and (queries is None or queries.num_rows == 0):
            return None
        store.ensure_arrangement(self.states.top, self.top_layout(store.layout(self.states.docs).schema))
        token = store.get_meta(self.token_key)
        cache = self._cache
        fresh = cache is None or token is None or cache.token != token
        if fresh:
            cache = self._cache = self._load(store)
        cache.token = None  # invalid until this step has gone through
        touched_docs = self._keys(docs, self.node.doc_key)
        touched_queries = self._keys(queries, self.node.query_key)
        if not fresh:  # the cache is the state before this step: apply the change
            before = set(cache.docs.slot[d] for d in touched_docs if d in cache.docs.slot)
            self._apply(cache, cache.docs, docs, self.node.doc_key, self.node.vector, self.states.docs)
            if self.node.index == "hnsw" and cache.docs.dim:
                if cache.hnsw is None:
                    cache.hnsw = _Hnsw(cache.docs.dim, self.node.metric)
                after = set(cache.docs.slot[d] for d in touched_docs if d in cache.docs.slot)
                cache.hnsw.update(cache.docs, np.array(sorted(before | after), np.int64))
            if self.node.queries is not None:
                self._apply(cache, cache.queries, queries, self.node.query_key, self.node.query_vector,
                            self.states.queries)
        new_tops = self._decide(cache, touched_docs, touched_queries, force)
        out = self._emit(store, cache, new_tops)
        for q, t in new_tops.items():
            cache.set_top(q, t, self.node.k, self.node.metric)
        cache.token = uuid.uuid4().hex
        store.set_meta(self.token_key, cache.token)
        return out

    # ------------------------------------------------------------------ the cache
    def _load(self, store: Any) -> _Cache:
        docs_rows = store.scan(self.states.docs)
        dim = self.node.dim
        if dim is None and self.node.query is not None:
            dim = len(self.node.query)
        queries_rows = store.scan(self.states.queries) if self.states.queries is not None else None
        if dim is None:
            for table, col in ((docs_rows, self.node.vector), (queries_rows, self.node.query_vector)):
                if table is not None and table.num_rows:
                    lengths = pc.list_value_length(table.column(col_name(col))).drop_null()
                    if len(lengths):
                        dim = int(lengths[0].as_py())
                        break
        cache = _Cache(None, _Vectors(dim or 0, self.node.metric), _Vectors(dim or 0, self.node.metric))
        self._put(cache, cache.docs, docs_rows, self.node.doc_key, self.node.vector, self.states.docs)
        if queries_rows is not None:
            self._put(cache, cache.queries, queries_rows, self.node.query_key, self.node.query_vector,
                      self.states.queries)
        elif self._fixed is not None:
            cache.queries.put([()], self._fixed[None, :])
        if self.node.index == "hnsw" and cache.docs.dim:
            cache.hnsw = _Hnsw(cache.docs.dim, self.node.metric)
            cache.hnsw.update(cache.docs, np.arange(cache.docs.n))
        top = store.scan(self.states.top)
        if top.num_rows:
            qkeys = self._keys(top, range(self.nq)) if self.nq else [()] * top.num_rows
            dkeys = list(zip(*(top.column(c).to_pylist() for c in self.key_cols)))
            ranks = top.column(col_name(self.nq)).to_numpy()
            dist = top.column(col_name(self.width - 1)).to_numpy()
            for i in np.lexsort((ranks,)).tolist():
                keys, ds = cache.tops.setdefault(qkeys[i], ([], []))  # type: ignore[arg-type]
                keys.append(dkeys[i])
                ds.append(dist[i])  # type: ignore[attr-defined]
            loaded, cache.tops = cache.tops, {}
            for q, (keys, ds) in loaded.items():
                cache.set_top(q, (keys, np.asarray(ds, np.float64)), self.node.k, self.node.metric)
        return cache

    def _keys(self, table: pa.Table | None, columns) -> list[Hashable]:
        if table is None or table.num_rows == 0:
            return []
        columns = list(columns)
        if not columns:
            return [()] * table.num_rows
        return list(zip(*(table.column(col_name(c)).to_pylist() for c in columns)))

    def _put(self, cache: _Cache, rows: _Vectors, table: pa.Table, key: tuple[int, ...], vector: int | None,
             state: str) -> None:
        if table.num_rows == 0:
            return
        matrix, lengths = vectors_of(table.column(col_name(vector)), rows.dim or None)
        cache.docs.ensure_dim(matrix.shape[1])
        cache.queries.ensure_dim(matrix.shape[1])
        bad = np.flatnonzero((lengths >= 0) & (lengths != rows.dim))
        if len(bad):
            at = int(bad[0])
            source, columns = self._source_name(state)
            names = ", ".join(f"{columns[c]}={table.column(col_name(c))[at].as_py()!r}" for c in key)
            raise DeltaError(f"vector view {self.view!r}: {source}.{columns[vector]} of ({names}) has "  # type: ignore[index]
                             f"{int(lengths[at])} values, but the view's vectors have {rows.dim}")
        rows.put(self._keys(table, key), matrix)

    def _source_name(self, state: str) -> tuple[str, list[str]]:
        scan = self.node.docs if state == self.states.docs else self.node.queries
        return scan.relation, [n for n, _ in scan.columns]  # type: ignore[union-attr]

    def _apply(self, cache: _Cache, rows: _Vectors, delta: pa.Table | None, key: tuple[int, ...],
               vector: int | None, state: str) -> None:
        if delta is None or delta.num_rows == 0:
            return
        w = delta.column(WEIGHT).to_numpy()
        gone = [k for k, x in zip(self._keys(delta, key), w) if x < 0]
        rows.remove(gone)
        self._put(cache, rows, delta.filter(pa.array(w > 0)), key, vector, state)

    # ------------------------------------------------------------------ decisions
    def _decide(self, cache: _Cache, touched_docs: list[Hashable], touched_queries: list[Hashable], force: bool
                ) -> dict[Hashable, tuple[list[Hashable], np.ndarray] | None]:
        """The new top-k of every query whose top-k may have changed (None: the query is gone)."""
        docs, queries, k, metric = cache.docs, cache.queries, self.node.k, self.node.metric
        new: dict[Hashable, tuple[list[Hashable], np.ndarray] | None] = {}
        recompute: list[Hashable] = []
        targets = set(queries.slot) if force else set(touched_queries)
        for q in targets:
            if q not in queries.slot:
                new[q] = None
            else:
                recompute.append(q)
        touched = set(touched_docs)
        if touched:
            # a query one of whose k nearest was touched recomputes (knn.needs_recompute's rule, by the
            # inverted index); every other query merges the touched documents
            stale = set().union(*(cache.holders.get(d, ()) for d in touched)) - targets
            recompute += [q for q in stale if q in queries.slot]
            new.update(self._merge_touched(cache, targets | stale, touched))
        new.update(self._recompute(cache, recompute))
        return new

    def _recompute(self, cache: _Cache, qkeys: list[Hashable]) -> dict[Hashable, tuple[list[Hashable], np.ndarray]]:
        docs, queries, node = cache.docs, cache.queries, self.node
        out: dict[Hashable, tuple[list[Hashable], np.ndarray]] = {q: ([], np.zeros(0)) for q in qkeys}
        candidates = np.flatnonzero(docs.live[:docs.n])
        measurable = [q for q in qkeys if queries.vector(q) is not None]
        if not len(candidates) or not measurable:
            return out
        max_sq = docs.max_sq
        if cache.hnsw is not None:  # approximate: the graph's candidates, measured exactly
            qm = np.stack([queries.vector(q) for q in measurable])
            for q, found, vec in zip(measurable, cache.hnsw.candidates(qm, 2 * node.k), qm):
                rows, dist = knn.top_k(docs.matrix, np.sort(found), vec, node.k, node.metric, docs.key_of)
                out[q] = ([docs.key_of(int(r)) for r in rows], dist)
            return out
        for start in range(0, len(measurable), _QUERY_BATCH):
            batch = measurable[start:start + _QUERY_BATCH]
            qm = np.stack([queries.vector(q) for q in batch])
            # screened over every slot in use (no copy of the matrix), then the live ones taken
            scores = knn.screen_queries(docs.matrix[:docs.n], qm, node.metric, docs.sq[:docs.n])
            every = len(candidates) == docs.n
            for j, q in enumerate(batch):
                qsq = float(knn.squared_norms(qm[j:j + 1])[0])
                margin = knn.score_margin(node.metric, docs.dim, qsq, max_sq)
                rows, dist = knn.top_k(docs.matrix, candidates, qm[j], node.k, node.metric, docs.key_of,
                                       screened=scores[j] if every else scores[j][candidates], margin=margin)
                out[q] = ([docs.key_of(int(r)) for r in rows], dist)
        return out

    def _merge_touched(self, cache: _Cache, exclude: set, touched: set
                       ) -> dict[Hashable, tuple[list[Hashable], np.ndarray]]:
        """Every live query but ``exclude`` against the touched documents' new versions: one
        (queries × changes) product, then a merge for each query some document comes near enough."""
        docs, queries, node = cache.docs, cache.queries, self.node
        slots = np.array(sorted(docs.slot[d] for d in touched if d in docs.slot and docs.live[docs.slot[d]]),
                         dtype=np.int64)
        qn = queries.n
        if not len(slots) or not queries.live[:qn].any():
            return {}
        scores = knn.screen_queries(docs.matrix[slots], queries.matrix[:qn], node.metric, docs.sq[slots],
                                    queries.sq[:qn])
        margins = np.broadcast_to(knn.score_margin(node.metric, docs.dim, queries.sq[:qn], docs.max_sq), (qn,))
        admit = knn.admitted(scores.T, queries.kth[:qn], queries.full[:qn], margins).T  # queries × docs
        admit &= queries.live[:qn, None]
        for q in exclude:
            if q in queries.slot:
                admit[queries.slot[q]] = False
        out: dict[Hashable, tuple[list[Hashable], np.ndarray]] = {}
        for j in np.flatnonzero(admit.any(axis=1)).tolist():
            q = queries.keys[j]
            keys, dist = cache.tops.get(q, ([], np.zeros(0)))
            new_rows = slots[admit[j]]
            new_dist = knn.exact_distances(docs.matrix[new_rows], queries.matrix[j], node.metric)
            cur_rows = np.array([docs.slot[key] for key in keys], dtype=np.int64)
            rows, d = knn.merge(cur_rows, dist, new_rows, new_dist, node.k, docs.key_of)
            out[q] = ([docs.key_of(int(r)) for r in rows], d)
        return out

    # ------------------------------------------------------------------ output
    def _emit(self, store: Any, cache: _Cache, new: dict[Hashable, tuple[list[Hashable], np.ndarray] | None]
              ) -> pa.Table | None:
        """Write the changed queries' rows to the top arrangement; their output delta."""
        changed = [q for q, t in new.items() if q in cache.tops or (t is not None and len(t[0]))]
        if not changed:
            return None
        top_schema = store.layout(self.states.top).weighted_schema
        if self.nq:
            probe = pa.table({col_name(i): pa.array([q[i] for q in changed], top_schema.field(col_name(i)).type)
                              for i in range(self.nq)})
            old = store.lookup(self.states.top, probe)
        else:
            old = store.scan(self.states.top)
        fresh = self._rows(store, new, changed, top_schema)
        delta = consolidate(pa.concat_tables([negate(old.select(top_schema.names).cast(top_schema)), fresh]))
        if delta.num_rows == 0:
            return None
        store.apply(self.states.top, delta)
        out = consolidate(delta.select([col_name(i) for i in range(self.width)] + [WEIGHT]))
        return out if out.num_rows else None

    def _rows(self, store: Any, new: dict, changed: list[Hashable], schema: pa.Schema) -> pa.Table:
        """The top arrangement's rows (weight +1) of the new top-k of ``changed`` queries."""
        qs, ranks, dkeys, dists = [], [], [], []
        for q in changed:
            t = new.get(q)
            if t is None:
                continue
            for r, (key, d) in enumerate(zip(t[0], t[1].tolist())):
                qs.append(q)
                ranks.append(r + 1)
                dkeys.append(key)
                dists.append(d)
        if not dkeys:
            return schema.empty_table()
        layout = store.layout(self.states.docs)
        uniq = list(dict.fromkeys(dkeys))
        probe = pa.table({c: pa.array([k[i] for k in uniq], layout.schema.field(c).type)
                          for i, c in enumerate(self.doc_key_cols)})
        found = store.lookup(self.states.docs, probe)
        at = {key: i for i, key in enumerate(zip(*(found.column(c).to_pylist() for c in self.doc_key_cols)))}
        take = pa.array([at[k] for k in dkeys], pa.int64())
        cols: dict[str, pa.Array] = {}
        for i in range(self.nq):
            cols[col_name(i)] = pa.array([q[i] for q in qs], schema.field(col_name(i)).type)
        cols[col_name(self.nq)] = pa.array(ranks, pa.int32())
        for j, c in enumerate(self.node.payload):
            cols[col_name(self.nq + 1 + j)] = found.column(col_name(c)).take(take)
        cols[col_name(self.width - 1)] = pa.array(dists, pa.float64())
        for name, c in zip(self.key_cols, self.doc_key_cols):
            cols[name] = found.column(c).take(take)
        cols[WEIGHT] = pa.array(np.ones(len(dkeys), np.int64))
        return pa.table(cols).cast(schema)

