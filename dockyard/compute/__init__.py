"""Compute backends (local processes, Ray) and the instance agent that runs a job."""
