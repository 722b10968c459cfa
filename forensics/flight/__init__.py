"""The flight recorder (README, "Flight recorder"; DESIGN.md, "Flight recorder"): `catch-load --ring`.

The recording goes into a bounded ring of segment files (capture/segments.py); a watcher process
(`watch`) reads each segment the writer closes, finds the triggers in it (`triggers`), merges them into
windows and keeps the long run's counters (`plan`), and saves each window as a capture of its own
(capture/window.py) with its first verdict. `run` starts and ends the watcher from catch-load.

This package sits beside the views: it reads captures and analyses them, and never imports the CLI.
"""
