"""Benchmarks: measured, never asserted on time. Run ``python -m tests.benchmarks.run``."""
