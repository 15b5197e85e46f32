"""One module per incremental operator; each states its delta rule in its docstring."""
