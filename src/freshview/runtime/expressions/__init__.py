"""Scalar expressions of the plan, evaluated by each executor with PostgreSQL semantics.

``spark`` lowers an ``Expr`` to a Spark ``Column``; ``arrow`` evaluates it
over Arrow arrays in-process.  Both implement the same semantics (NULLs,
integer division, overflow, errors), pinned by tests that run every function
through both and through PostgreSQL.  Import the module you need: importing
this package loads neither pyspark nor pyarrow.compute.
"""
