"""Change-message formats ↔ weighted rows (``debezium``: Debezium JSON).  Pure: no I/O, no engine."""
