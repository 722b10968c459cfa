"""Exports of a capture for other tools: a Perfetto/Chrome JSON trace, and plain CSV or Parquet tables.

`frames.py` asks the analyses for the DataFrames (windows, verdicts) in bounded memory; `perfetto.py`
and `tables.py` only write them.
"""
