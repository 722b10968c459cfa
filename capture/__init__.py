"""The bottom layer: the capture file format, its errors and the shared vocabulary.

Imports nothing of the project (an import-linter contract in pyproject.toml keeps it so); samplers,
analyses, views and the CLI all stand on it. `forensics.load` and `forensics.Capture` are the public
names. Nothing is imported here: the recorder and the lab import `capture.errors` and must stay light.
"""
