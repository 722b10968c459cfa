"""Threads that started and ended between two scans: never sampled, but counted (a lower bound).

New threads of a known process are found by listing /proc/<pid>/task every 50 ms (the recorder's
thread scan), so a thread that lives 1-20 ms between two scans is never read. The process leader's
stat line, read at every tick, carries the process's thread count (field 20, num_threads): each rise
of it between two ticks is at least that many threads created. Every thread created during the
recording is either found by a later scan, still unfound at the end, or ended unseen, so

    ended unseen >= rises of num_threads - threads found after the process's first tick
                    - threads alive but not yet found at the end.

A lower bound: a thread created and ended within one tick (2 ms), or a creation and an ending between
the same two ticks, leaves num_threads unchanged. eBPF (sched_process_fork) would count them exactly.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Process:
    last_count: int
    rises: int = 0
    found_later: int = 0
    unfound_at_end: int = 0


class UnseenThreads:
    """Fed tick by tick, in the order the recorder sent them (thread rows and ticks interleaved)."""

    def __init__(self) -> None:
        self.processes: dict[int, _Process] = {}

    def tick(self, pid: int, num_threads: int, sampled: int) -> None:
        """The leader's num_threads at a tick, and how many of the process's threads that tick read."""
        process = self.processes.get(pid)
        if process is None:
            self.processes[pid] = process = _Process(num_threads)
        elif num_threads > process.last_count:
            process.rises += num_threads - process.last_count
        process.last_count = num_threads
        process.unfound_at_end = max(0, num_threads - sampled)

    def thread_found(self, pid: int) -> None:
        process = self.processes.get(pid)
        if process is not None:  # threads found with their process (before its first tick) are not new
            process.found_later += 1

    def lower_bounds(self) -> dict[int, int]:
        """Per process: at least this many threads started and ended without ever being sampled."""
        return {pid: max(0, p.rises - p.found_later - p.unfound_at_end) for pid, p in sorted(self.processes.items())}
