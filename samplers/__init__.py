"""Samplers: read kernel counters of target threads on a clock and write a capture.

They know nothing of analyses; the capture format (capture/format.py) is all they share.
"""
