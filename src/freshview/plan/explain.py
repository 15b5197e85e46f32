"""Stable text rendering of logical plans (for ``explain`` and test fixtures)."""

from __future__ import annotations

from freshview.plan import nodes as pn
from freshview.plan.flatmap import FlatMap
from freshview.plan.temporal import TemporalFilter
from freshview.plan.vector import VectorSearch


def render(node: pn.Node, indent: int = 0) -> str:
    pad = "  " * indent
    line = pad + describe(node)
    return "\n".join([line] + [render(c, indent + 1) for c in node.inputs()])


def describe(node: pn.Node) -> str:
    if isinstance(node, pn.Scan):
        kind = "view" if node.is_view else "source"
        return f"Scan {kind} {node.relation} [{', '.join(n for n, _ in node.columns)}]"
    if isinstance(node, pn.Constant):
        return f"Constant {len(node.rows)} row(s) [{', '.join(n for n, _ in node.columns)}]"
    if isinstance(node, pn.Filter):
        return f"Filter {node.predicate}"
    if isinstance(node, TemporalFilter):
        return f"TemporalFilter {node.predicate} (now = ${node.now_column})"
    if isinstance(node, pn.Project):
        return "Project " + ", ".join(f"{n}={e}" for n, e in zip(node.names, node.exprs))
    if isinstance(node, pn.Join):
        keys = ", ".join(f"{l} = {r}" for l, r in zip(node.left_keys, node.right_keys)) or "cross product"
        return f"Join on {keys}"
    if isinstance(node, pn.LogicalJoin):
        keys = ", ".join(f"{l} = {r}" for l, r in zip(node.left_keys, node.right_keys)) or "no key"
        residual = f" and {node.residual}" if node.residual is not None else ""
        return f"{node.kind.replace('_', ' ').upper()} JOIN on {keys}{residual}"
    if isinstance(node, pn.Aggregate):
        groups = ", ".join(map(str, node.group)) or "()"
        return f"Aggregate group by {groups}: {', '.join(map(str, node.aggs))}"
    if isinstance(node, pn.Distinct):
        return "Distinct"
    if isinstance(node, pn.UnionAll):
        return f"UnionAll ({len(node.parts)} inputs)"
    if isinstance(node, pn.TopK):
        limit = "ALL" if node.limit is None else node.limit
        return f"TopK order by {_sort_keys(node.order)} limit {limit} offset {node.offset}"
    if isinstance(node, pn.Window):
        part = ", ".join(f"${c}" for c in node.partition) or "()"
        funcs = ", ".join(f"{f.func}({'' if f.arg is None else f'${f.arg}'})" for f in node.functions)
        return f"Window partition by {part} order by {_sort_keys(node.order) or '()'}: {funcs}"
    if isinstance(node, pn.Recursive):
        kind = "UNION" if node.distinct else "UNION ALL"
        return (f"Recursive {node.name} ({kind}; inputs: the anchor, then {len(node.externals)} external) "
                f"step: {' <- '.join(describe(n) for n in _spine(node.step))}")
    if isinstance(node, (pn.RecursiveRef, pn.ExternalRef)):
        return f"{type(node).__name__} {getattr(node, 'name', getattr(node, 'index', ''))}"
    if isinstance(node, VectorSearch):
        docs = node.docs.columns
        against = (f"each row of {node.queries.relation} (by {', '.join(n for n, _ in node.query_columns)}, "
                   f"vector {node.queries.columns[node.query_vector][0]})" if node.queries is not None
                   else f"a fixed {len(node.query or ())}-dimensional query")  # type: ignore[index]
        index = f", index {node.index}" if node.index else ", exact"
        return (f"VectorSearch {node.k} nearest by {node.metric}{index}: {node.docs.relation}.{docs[node.vector][0]} "
                f"against {against}; payload {', '.join(docs[i][0] for i in node.payload)}; "
                f"ties by {', '.join(docs[i][0] for i in node.doc_key)}")
    if isinstance(node, FlatMap):
        return (f"FlatMap {', '.join(map(str, node.calls))}" + (" with ordinality" if node.ordinality else "")
                + (" (a row without any kept, NULL-padded)" if node.outer else ""))
    if isinstance(node, pn.Reweight):
        return f"Reweight weight × {node.weight}"
    return type(node).__name__


def _spine(node: pn.Node) -> list[pn.Node]:
    """``node`` and its descendants, depth first (a recursive step on one line)."""
    out = [node]
    for child in node.inputs():
        out += _spine(child)
    return out


def _sort_keys(keys) -> str:
    return ", ".join(f"${k.column}{' DESC' if k.descending else ''}"
                     f"{' NULLS FIRST' if k.nulls_go_first else ' NULLS LAST'}" for k in keys)
