"""One module per resource; each maps operation names to thin handler functions."""
