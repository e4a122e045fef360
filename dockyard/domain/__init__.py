"""Pure rules: no I/O, no clock reads, nothing else of dockyard imported."""
