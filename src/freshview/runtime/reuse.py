"""A view's first computation starting from another circuit's operator state (``alter_view``).

An alter's new definition often shares most of its plan with the old one: the same join with another
filter or column on top, an aggregate over the same join with an aggregate added.  The shared part's
state (the join's two arranged sides, the aggregate's accumulators) is what the first computation of
the new circuit would build again, row by row, from its sources.  Instead:

1. ``pin_circuit`` takes the old circuit's operators with their state as committed now
   (``runtime.state.pin``: immutable runs), between two steps, at the moment the sources' copies are
   pinned for the new view's population, so both describe the same database state.
2. ``matches`` finds the new circuit's operators that root a subtree *equal* to one of the old circuit
   (plan node equality, which is recursive: the same operator over the same inputs down to the same
   source scans), a join or an aggregate, largest first; and, for a join that is not shared whole (a
   filter added to one side is pushed below it), each side whose input and key equal a side of an
   old join.  An operator's state is a function of its inputs' contents alone (the integral of its
   input changes), a join side's arrangement of that side's input alone, and equal subtrees over the
   same pinned sources have the same inputs: the old state is the state the new operator would build.
3. The engine links the pinned runs into the new operators' arrangements (``state_pairs``, every
   stateful operator of the subtree; O(run files), no row copied: ``SpineStateStore.adopt_runs``).
   The runner emits each shared root's whole output from its state (``CircuitRunner.seeded``: a join
   joins its two stored sides, an aggregate finalises its accumulators) instead of evaluating its
   inputs, so nothing below it is computed or written; a shared join side's input emits nothing
   (``CircuitRunner.silent``) and the join meets the other side's whole input with the linked side,
   ΔL ⋈ R, as any step does.  Later steps find the state as if they had built it.

Vector searches keep vectors in memory outside the state and are never matched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from freshview.circuit import Circuit, Operator
from freshview.circuit.arrangements import operator_part
from freshview.plan import nodes as pn
from freshview.runtime.state.pin import Pinned, pin

if TYPE_CHECKING:
    from freshview.runtime.state.store import SpineStateStore

log = logging.getLogger("freshview.engine")

ROOTS = ("join", "aggregate")  # operators whose whole output their state gives (``CircuitRunner.seeded``)
_NEVER = ("vector",)  # operators whose state is not all in the store


@dataclass(frozen=True)
class PinnedOperator:
    """One operator of a pinned circuit: its plan node, its state as pinned (in ``Operator.state_names``'
    order), and its inputs."""

    node: pn.Node
    kind: str
    state: tuple[Pinned, ...]
    inputs: tuple["PinnedOperator", ...]


@dataclass(frozen=True)
class PinnedCircuit:
    """A view's circuit with every operator's state as committed at one moment."""

    view: str
    root: PinnedOperator


def pin_circuit(circuit: Circuit, store: SpineStateStore) -> PinnedCircuit:
    """``circuit``'s operators and their state as committed now (between two steps, in the store's thread)."""

    def of(op: Operator) -> PinnedOperator:
        return PinnedOperator(op.node, op.kind, tuple(pin(store, name) for name in op.state_names),
                              tuple(of(i) for i in op.inputs))
    return PinnedCircuit(circuit.view, of(circuit.root))


@dataclass
class Reuse:
    """What a new circuit takes from a pinned one: the arrangements linked (new name, pinned state), the
    operators whose first output is their whole output read from that state (``seeded``: joins and
    aggregates), and those whose first output is nothing (``silent``: a join side whose arrangement was
    linked; its join meets the other side's rows with it)."""

    links: list[tuple[str, Pinned]] = field(default_factory=list)
    seeded: set[str] = field(default_factory=set)
    silent: set[str] = field(default_factory=set)
    reused: list[str] = field(default_factory=list)  # what was reused, for the log

    def __bool__(self) -> bool:
        return bool(self.links)


def matches(circuit: Circuit, pinned: PinnedCircuit) -> Reuse:
    """What ``circuit`` can take from ``pinned``: each largest subtree equal to a pinned one rooted at a join
    or an aggregate (seeded, its whole state linked); else, per join, each side whose input and key equal a
    side of a pinned join (that side's arrangement and its input's state linked, the input silent)."""
    operators = [p for p in _pinned_operators(pinned.root) if _linkable(p)]
    roots = [p for p in operators if p.kind in ROOTS]
    sides = [(p.node.inputs()[i], _keys(p.node, i), p.state[i], p.inputs[i])  # type: ignore[attr-defined]
             for p in operators if p.kind == "join" for i in (0, 1)]
    out = Reuse()

    def visit(op: Operator) -> None:
        if op.kind in ROOTS:
            twin = next((p for p in roots if p.node == op.node and _same_shape(op, p)), None)
            if twin is not None:
                out.seeded.add(op.id)
                out.links.extend(state_pairs(op, twin))
                out.reused.append(f"{op.kind} {operator_part(op.id)}")
                return
        if op.kind != "join":
            for child in op.inputs:
                visit(child)
            return
        linked = 0
        for i, child in enumerate(op.inputs):
            node, keys = op.node.inputs()[i], _keys(op.node, i)
            twin_side = next(((state, p) for n, k, state, p in sides
                              if n == node and k == keys and _same_shape(child, p)), None)
            if twin_side is None:
                visit(child)
                continue
            linked += 1
            out.silent.add(child.id)
            out.links.append((op.state_names[i], twin_side[0]))
            out.links.extend(state_pairs(child, twin_side[1]))
            out.reused.append(f"join {operator_part(op.id)}'s {('left', 'right')[i]} side")
        if linked == 2:
            out.seeded.add(op.id)
    visit(circuit.root)
    return out


def link(store: SpineStateStore, circuit: Circuit, pinned: PinnedCircuit) -> Reuse:
    """Link into ``store`` the state ``circuit`` shares with ``pinned`` (``matches``; the new arrangements
    empty), inside its transaction, and log what was reused; what the runner then skips (``Reuse``)."""
    found = matches(circuit, pinned)
    for name, state in found.links:
        store.ensure_arrangement(name, state.layout)
        store.adopt_runs(name, state.runs, state.directory)  # type: ignore[arg-type]
    if found:
        log.info("view %s: state reused from %s (%s)", circuit.view, pinned.view, ", ".join(found.reused))
    return found


def state_pairs(op: Operator, twin: PinnedOperator) -> Iterator[tuple[str, Pinned]]:
    """Each state arrangement of ``op``'s subtree with the pinned state it starts from (its twin's)."""
    yield from zip(op.state_names, twin.state)
    for child, pinned_child in zip(op.inputs, twin.inputs):
        yield from state_pairs(child, pinned_child)


def _keys(join: pn.Node, side: int) -> tuple:
    return join.left_keys if side == 0 else join.right_keys  # type: ignore[attr-defined]


def _pinned_operators(root: PinnedOperator) -> Iterator[PinnedOperator]:
    yield root
    for child in root.inputs:
        yield from _pinned_operators(child)


def _linkable(p: PinnedOperator) -> bool:
    return p.kind not in _NEVER and all(s.directory is not None for s in p.state) and \
        all(_linkable(i) for i in p.inputs)


def _same_shape(op: Operator, twin: PinnedOperator) -> bool:
    """The same operators with the same state parts, all the way down (equal nodes lift alike; checked,
    not assumed)."""
    return (op.kind == twin.kind and len(op.state_names) == len(twin.state) and len(op.inputs) == len(twin.inputs)
            and all(_same_shape(c, p) for c, p in zip(op.inputs, twin.inputs)))
