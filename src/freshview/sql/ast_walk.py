"""Walking sqlglot trees the way the subquery rules need: conjuncts, parentheses, a query's own columns."""

from __future__ import annotations

from sqlglot import exp


def conjuncts_ast(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts_ast(node.left) + conjuncts_ast(node.right)
    return [node]


def strip(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def own_columns(node: exp.Expression):
    """Columns of ``node`` outside any nested subquery (those belong to the subquery's scope)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, exp.Column):
            yield n
            continue
        for child in n.iter_expressions():
            if isinstance(child, (exp.Subquery, exp.Select, exp.Union)):
                continue
            stack.append(child)


__all__ = ["conjuncts_ast", "strip", "own_columns"]
