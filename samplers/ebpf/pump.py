"""Running the eBPF collector inside the writer process, beside the frame parsing.

A thread polls the ring buffer every POLL_MS and keeps the decoded tables until the writer's next
chunk; the writer tells it the target processes as the recorder discovers them. The writer is not
timing-critical, so the collector's decoding never touches the recorder's tick.
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa

from samplers.ebpf.collector import EbpfCollector, EbpfOptions

POLL_MS = 50  # the 4 MiB ring holds ~43 000 events: 50 ms of headroom up to ~800 000 events/s


class EbpfPump:
    def __init__(self, options: EbpfOptions | None = None) -> None:
        self.collector = EbpfCollector((), options)
        self._tables: dict[str, list[pa.Table]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.messages: list[str] = []

    def start(self) -> None:
        """Compile and attach (raises EbpfUnavailable with one line), then poll in the background."""
        self.messages = self.collector.start()
        self._thread = threading.Thread(target=self._run, name="ebpf-pump", daemon=True)
        self._thread.start()

    def _keep(self, batch: dict[str, pa.Table]) -> None:
        with self._lock:
            for name, table in batch.items():
                if table.num_rows:
                    self._tables.setdefault(name, []).append(table)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._keep(self.collector.poll(POLL_MS))

    def add_pid(self, pid: int) -> None:
        if pid not in self.collector.tgids:
            self.collector.add_tgids([pid])

    def take(self) -> dict[str, pa.Table]:
        """Everything decoded since the last call, one table per name."""
        with self._lock:
            tables, self._tables = self._tables, {}
        return {name: pa.concat_tables(parts) for name, parts in tables.items()}

    def stop(self) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        """Detach, drain, and return the last tables and the event/loss statistics."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._keep(self.collector.stop())
        return self.take(), self.collector.stats()

    def meta(self) -> dict[str, Any]:
        return self.collector.meta()
