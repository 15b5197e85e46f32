"""The MySQL/MariaDB change source: types, catalog, consistent snapshot, binlog stream, deltas.

See docs/architecture.md, "MySQL/MariaDB: the change source".
"""
