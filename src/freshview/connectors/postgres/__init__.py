"""PostgreSQL: pgoutput decoding (``protocol``, no I/O), value conversion (``types``)."""
