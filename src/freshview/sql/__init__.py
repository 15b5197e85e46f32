"""SQL front end: view text to an optimised logical plan.

``parse`` reads PostgreSQL-dialect SQL with sqlglot and keeps positions;
``bind_expr`` resolves and types scalar expressions; ``typing`` holds the
PostgreSQL result-type rules; ``setops`` plans UNION/INTERSECT/EXCEPT and
``ctes`` the WITH scopes (``recursive``: WITH RECURSIVE); ``build``
assembles the plan, pushing filters and column pruning toward the sources.
Every refusal is a located ``SqlError``.  This package imports ``plan`` and ``schema`` only.
"""

from freshview.sql.build import Catalog, build_plan, compile_view

__all__ = ["Catalog", "build_plan", "compile_view"]
