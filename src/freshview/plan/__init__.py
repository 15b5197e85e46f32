"""The logical plan: frozen, typed relational nodes and scalar expressions.

``expr`` holds scalar expressions (column references by position, literals,
calls, CASE, CAST) typed with PostgreSQL rules; ``nodes`` holds relational
operators (Scan, Filter, Project, Join, Aggregate, Distinct, UnionAll); the
builder in ``freshview.sql.build`` is the only producer, and ``explain``
renders a plan as stable text.  No sqlglot object crosses into this package:
everything below the SQL front end works on these records.
"""
