"""eBPF (BCC) backend: exact sched_switch / wake-up / page-fault / block events of the target processes.

`EbpfCollector` (collector.py) is the interface; tables.py the records and capture tables; probes.bpf.c
the kernel side; kernel_stub.py, bcc_import.py and tracefs.py make BCC work on kernels without headers,
from a non-system Python, and decode prev_state by the running kernel's own rules.
"""

from samplers.ebpf.collector import EbpfCollector, EbpfOptions, EbpfUnavailable, merge_tables

__all__ = ["EbpfCollector", "EbpfOptions", "EbpfUnavailable", "merge_tables"]
