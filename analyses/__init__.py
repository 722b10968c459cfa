"""Analyses: pure functions from a capture to pandas DataFrames. No I/O, no printing."""
