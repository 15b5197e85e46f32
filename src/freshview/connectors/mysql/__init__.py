"""MySQL and MariaDB: the change source (types, catalog, consistent snapshot, binlog stream, deltas),
DSNs, result tables, the ``freshview`` control database and setup checks.

See docs/architecture.md, "MySQL/MariaDB: the change source".
"""
