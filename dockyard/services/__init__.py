"""Application operations, one module per resource; each function is one transaction."""
