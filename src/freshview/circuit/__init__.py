"""The incremental circuit of a view, engine-neutral.

``incrementalize`` lifts each plan node into its incremental operator (linear
ones act on deltas alone; joins and aggregates keep named state) and gives
every stateful operator a stable id, so state found on disk after a restart
belongs to the same operator.  ``render`` prints the circuit for ``explain``.
This package imports ``plan`` only; ``runtime`` executes circuits.
"""

from freshview.circuit.nodes import AggState, Circuit, JoinState, Operator, StateSpec, incrementalize, render

__all__ = ["AggState", "Circuit", "JoinState", "Operator", "StateSpec", "incrementalize", "render"]
