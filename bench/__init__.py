"""Benchmarks: `make bench` runs them and prints a report; nothing here asserts on timing."""
