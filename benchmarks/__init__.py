"""Benchmarks: speed and memory targets live here, never in timed unit tests."""
