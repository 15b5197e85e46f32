"""The walk the local rules share: inputs first, then ``visit_<Node>`` on the node rebuilt over them.

A rule subclasses ``BottomUp`` and defines ``visit_<Node>`` for the node
kinds it rewrites; other kinds are rebuilt over their rewritten inputs.  A
``Recursive`` node's step (not one of its inputs) is rewritten the same way.
"""

from __future__ import annotations

from dataclasses import replace

from freshview.plan import nodes as pn


class BottomUp:
    def __call__(self, node: pn.Node) -> pn.Node:
        node = pn.with_inputs(node, [self(child) for child in node.inputs()])
        visit = getattr(self, f"visit_{type(node).__name__}", None)
        return visit(node) if visit is not None else node

    def visit_Recursive(self, node: pn.Recursive) -> pn.Node:
        return replace(node, step=self(node.step))
