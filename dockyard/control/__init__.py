"""Reconcilers and the scheduler loop: the only callers of a compute backend."""
