"""The algebra of changes: weighted rows (Z-sets) held as Arrow tables.

A delta is an Arrow table with the relation's columns plus an int64
``_weight`` column.  This package owns how deltas are validated, consolidated,
negated and concatenated; it knows nothing of SQL, Spark or databases, and
every other layer may import it.
"""

from freshview.algebra.batch import DeltaBatch, consolidate, to_arrow_delta

__all__ = ["DeltaBatch", "consolidate", "to_arrow_delta"]
