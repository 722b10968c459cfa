"""A capture's metadata and trailer as readable sections (for `forensics info` and the report)."""

from __future__ import annotations

from typing import Any, SupportsFloat

from capture.format import Capture


def fmt_ns(ns: SupportsFloat | None) -> str:
    """A duration for people: 1234 -> "1.2 us", 2_000_000 -> "2.000 ms"."""
    if ns is None:
        return "unknown"
    ns = float(ns)
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def asked_threads(pattern: str | None, tids: tuple[int, ...] = (), joiner: str = " or ") -> str:
    """The thread selection options a user gave (`--thread 'RE' or --tid N`), as they wrote them."""
    return joiner.join([*([f"--thread {pattern!r}"] if pattern is not None else []), *[f"--tid {t}" for t in tids]])


def marker_rows(cap: Capture) -> dict[str, str]:
    """The markers set while recording, numbered from 1, with their time since the capture's first sample
    (the times `--span` takes, and its `LABEL..LABEL` form takes the labels)."""
    from analyses.source import capture_origin_ns

    events = cap.events
    markers = events[events["kind"] == "marker"].sort_values("t_ns", kind="stable")
    if markers.empty:
        return {"markers": "none (Enter or SIGUSR1 while recording adds one)"}
    origin = capture_origin_ns(cap) or int(markers["t_ns"].iloc[0])
    return {
        str(i): f"{(int(t) - origin) / 1e9:.3f} s  {text}"
        for i, (t, text) in enumerate(zip(markers["t_ns"], markers["text"], strict=True), start=1)
    }


# The tables a verdict is decided from (stalls, incidents, spikes): where their rows were lost to damage,
# a view decides nothing.
DECIDED_FROM = (
    "samples",
    "sched",
    "taskstats",
    "sampler_ticks",
    "sched_switch",
    "sched_wakeup",
    "page_faults",
    "block_rq",
    "engine_cycles",
    "engine_nodes",
)


def damage_notes(
    cap: Capture, origin_ns: int | None, t_range: tuple[int | None, int | None] | None = None
) -> list[str]:
    """One 'no verdict' line per span between rows read where rows a verdict is decided from were lost to
    damaged bytes (Capture.damage; the loader's warning names the same span), those touching `t_range`.
    Damage before the first row or after the last read decides nothing: nothing is read there."""
    start, end = t_range if t_range is not None else (None, None)
    spans: dict[tuple[int, int] | None, set[str]] = {}
    for damage in cap.damage:
        low, high = damage.after_ns, damage.before_ns
        if damage.table not in DECIDED_FROM:
            continue
        if low is None or high is None:
            if low is None and high is None:  # at an unknown time
                spans.setdefault(None, set()).add(damage.table)
        elif (start is None or high > start) and (end is None or low < end):
            spans.setdefault((low, high), set()).add(damage.table)

    def s(ns: int) -> str:
        return f"{(ns - (origin_ns or 0)) / 1e9:.3f}"

    notes = []
    for span, tables in sorted(spans.items(), key=lambda item: item[0] or (-1, -1)):
        lost = f"{', '.join(sorted(tables))} rows lost"
        if span is None:
            notes.append(f"Verdicts may miss episodes: the capture is damaged at an unknown time ({lost}).")
        else:
            notes.append(f"No verdict for {s(span[0])}-{s(span[1])} s: the capture is damaged there ({lost}).")
    return notes


_TICK_CODE = {
    "c": "compiled (samplers/_tick.c)",
    "python": "Python (no compiled tick in this install, or FORENSICS_PURE_PYTHON=1)",
}


def _proc_tick(rec: dict[str, Any]) -> bool:
    return rec.get("sampler") != "ebpf" and isinstance(rec.get("tick_code"), str)


def _ebpf_sampler_text(sampler: dict[str, Any]) -> str:
    """How often the eBPF sampler read what: its metadata (samplers/ebpf/sampler.py EbpfTicker.start)."""
    text = f"eBPF sampler: the kernel's counters every tick, stat every {fmt_ns(sampler.get('stat_slow_ns'))}"
    refresh_ns = sampler.get("stat_refresh_ns")
    if refresh_ns is not None:  # captures since StatChoice: a sleeping thread's stat only when its slot moved
        text += f" (a sleeping thread's when it ran or woke since, at least every {fmt_ns(refresh_ns)})"
    return text


def _yes_no(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _tiers_text(cap: Capture, rec: dict[str, Any]) -> str:
    """Who was read less often than every tick (README "Read tiers"): --slow-interval auto says from when."""
    auto = cap.meta.get("read_tiers")
    if isinstance(auto, dict):
        since = auto.get("on_ns", 0) - (rec.get("started_ns") or 0)
        return (
            f"{fmt_ns(auto.get('slow_interval_ns'))} slow tier from {fmt_ns(max(since, 0))} on "
            f"(auto: {auto.get('threads')} threads)"
        )
    if rec.get("sampler") == "ebpf" or "tiers" not in cap.table_names:
        return "off: every thread every tick"
    tiers = cap.table("tiers", columns=["tier", "interval_ns"])
    slow = tiers[tiers["tier"].astype(str) == "slow"]
    if slow.empty:
        return "off: every thread every tick"
    return f"{fmt_ns(int(slow['interval_ns'].max()))} slow tier from the start"


def _taskstats_text(sources: dict[str, Any]) -> str:
    """--taskstats auto as what it queried (samplers/tiers.py adds_to_proc); the other modes as they are."""
    mode = sources.get("taskstats")
    if mode != "auto":
        return _yes_no(mode)
    if sources.get("delayacct") is False:
        return "auto: real-time threads with no sched file read (delay accounting off)"
    return "auto: real-time threads"


def describe_capture(cap: Capture) -> dict[str, Any]:
    """Sections of label -> text, plus the raw meta/trailer/counts for JSON."""
    meta = cap.meta
    trailer = cap.trailer
    host = cap.host
    cpus = cap.cpus
    sources = cap.sources
    rec = meta.get("recording", {})
    # The rows that read back, beside the trailer's count of those written where the two differ.
    counts = {name: len(cap.table(name, columns=_first_column(cap, name))) for name in cap.table_names}
    trailer_rows = (trailer or {}).get("rows")
    written = {
        name: n
        for name, n in (trailer_rows.items() if isinstance(trailer_rows, dict) else ())
        if isinstance(n, int) and not isinstance(n, bool)
    }

    machine = {
        "host": host.get("hostname", "unknown"),
        "kernel": f"{host.get('kernel_release', 'unknown')} {host.get('kernel_version', '')}".strip(),
        "preemption": host.get("preemption", "unknown"),
        "cpus online": cpus.get("online_list", "unknown"),
        "core types": ", ".join(f"{k}: {v}" for k, v in (cpus.get("core_types") or {}).items()) or "uniform",
        "governor": ", ".join(sorted(set((cpus.get("governor") or {}).values()))) or "unknown",
    }
    source_rows = {
        # --sampler auto's choice (samplers/sampler_choice.py); a sampler given on the command line shows below
        **({"sampler": f"{rec.get('sampler')} (auto: {rec['sampler_why']})"} if rec.get("sampler_why") else {}),
        "schedstat + stat": _ebpf_sampler_text(meta.get("ebpf_sampler") or {})
        if rec.get("sampler") == "ebpf"
        else "every tick",
        "read tiers": _tiers_text(cap, rec),
        # The /proc sampler's reads at the tick: compiled, or in Python where the install could not build them
        **({"tick reads": _TICK_CODE.get(rec["tick_code"], str(rec["tick_code"]))} if _proc_tick(rec) else {}),
        "sched file": sources.get("sched", "unknown"),
        "schedstats": _schedstats_text(sources),
        "delay accounting": _yes_no(sources.get("delayacct")),
        "taskstats": _taskstats_text(sources),
        # the scheduler's switch and wake-up events of --ebpf (not the eBPF sampler of the row above)
        "eBPF events": _ebpf_text(sources.get("ebpf"), (trailer or {}).get("ebpf")),
        "pressure (PSI)": _yes_no(sources.get("psi")),
    }
    timing: dict[str, str] = {
        "interval asked": fmt_ns(rec.get("interval_ns")),
        "started": str(rec.get("started_wall", "unknown")),
    }
    if trailer is None:
        timing["trailer"] = "MISSING: the recorder did not finish (killed?); timing below is unknown"
    else:
        timing.update(
            {
                "duration": fmt_ns(trailer.get("duration_ns")),
                "ticks": str(trailer.get("ticks", "unknown")),
                "missed ticks": _missed_text(trailer),
                "interval p50/p99/max": " / ".join(
                    fmt_ns(trailer.get(k)) for k in ("interval_p50_ns", "interval_p99_ns", "interval_max_ns")
                ),
                "recorder CPU": _cpu_text(trailer),
                "ended because": str(trailer.get("end_reason", "unknown")),
                "threads never read": _unseen_text(trailer),
            }
        )
    targets = rec.get("targets", {})
    target_rows = {k: str(v) for k, v in targets.items() if v not in (None, [], False, "")}
    target_rows["command line"] = " ".join(rec.get("argv", [])) or "unknown"
    content = {}
    for name in sorted(set(counts) | set(written)):
        read = counts.get(name, 0)
        differs = name in written and written[name] != read
        content[name] = f"{read} (the trailer says {written[name]} were written)" if differs else str(read)
    threads = cap.threads
    if not threads.empty:
        content["distinct threads"] = str(len(threads))
        content["distinct processes"] = str(threads["pid"].nunique())
    if meta.get("tool_version"):
        tool = f"{meta.get('tool', 'forensics')} {meta['tool_version']}"
        content["written by"] = f"{tool}, format {meta.get('format_version')}"
    sections = {
        "Machine": machine,
        "Sources": source_rows,
        "Timing": timing,
        "Targets": target_rows,
        "Contents (rows)": content,
    }
    sections["Markers"] = marker_rows(cap)
    engines = cap.engine_sources
    for kind, engine in engines.items():  # a section per engine source (a JACK server beside PipeWire: two)
        attached = _attached_rows(cap, rec.get("started_ns"), engine, alone=len(engines) == 1)
        if len(engines) == 1:
            sections["Engine"] = {**engine_rows(engine, counts), **attached}
            continue
        own: dict[str, int] = {  # each source's own rows (the engine column)
            name: int((cap.table(name, ["engine"])["engine"].astype(str) == kind).sum())
            for name in ("xruns", "engine_cycles")
            if name in cap.table_names
        }
        sections[f"Engine ({kind})"] = {**engine_rows(engine, own), **attached}
    if cap.warnings:
        sections["Warnings"] = {str(i + 1): w for i, w in enumerate(cap.warnings)}
    return {"sections": sections, "meta": meta, "trailer": trailer, "rows": counts}


def engine_rows(engine: dict[str, Any], counts: dict[str, int]) -> dict[str, str]:
    """What the engine source recorded (meta["sources"]["engine"]), or why it could not."""
    if engine.get("unavailable"):
        return {"source": str(engine.get("kind", "?")), "recorded": f"nothing: {engine['unavailable']}"}
    # JACK's source names its server and measures its clock against ours; PipeWire's names the daemon's socket
    # and reads times already on CLOCK_MONOTONIC (nothing to measure), through the profiler.
    server = engine.get("server")
    if server is None and engine.get("socket"):
        server = f"{engine['socket']} (daemon pid {engine.get('daemon_pid', 'unknown')})"
    cycles = engine.get("cycles")
    if cycles is None and engine.get("mechanism"):
        cycles = f"the profiler's driver and node times of every cycle ({engine['mechanism']})"
    clock = engine.get("jack_clock", engine.get("clock", "unknown"))
    if "clock_offset_drift_ns" in engine:
        drift = f", drift {engine['clock_offset_drift_ns']} ns"
    elif str(clock).startswith("CLOCK_MONOTONIC ") or clock == "CLOCK_MONOTONIC":
        drift = ": the capture's own clock"
    else:
        drift = ", drift unknown"
    rows = {
        "source": f"{engine.get('kind', '?')} {engine.get('version', '')}".strip(),
        "server": str(server if server is not None else "unknown"),
        "clock offset": f"{engine.get('clock_offset_ns', 'unknown')} ns to CLOCK_MONOTONIC "
        f"(engine clock {clock}{drift})",
        "per-cycle timing": str(cycles if cycles is not None else "unknown"),
        "xruns reported": str(counts.get("xruns", 0)),
        "cycles observed": str(counts.get("engine_cycles", 0)),
    }
    if engine.get("server_log"):  # JACK: whether the server's "was not finished" lines were read
        rows["server log"] = str(engine["server_log"])
    if engine.get("dsp_load"):
        rows["DSP load"] = str(engine["dsp_load"])
    if engine.get("client_pids"):
        rows["client pids"] = str(engine["client_pids"])
    return rows


SOURCE_EVENTS = {"engine_source_started": "attached", "engine_source_ended": "ended"}


def _attached_rows(cap: Capture, started_ns: Any, engine: dict[str, Any], alone: bool) -> dict[str, str]:
    """When an engine source attached and ended, from the recording's start: a source that waited for its
    server ("wait for jackd") attached later, one whose server went away ended early, a restarted server
    is attached again. From the source's own metadata (`attachments`: [attached_ns, ended_ns or None] per
    server); captures from before it have only the events, which name no engine: read for a capture with
    one source alone. The start is what every view counts its times from (the first sample:
    analyses.source.capture_origin_ns), so that an attach reads against the incidents' times: the
    recorder's own start comes 3-20 ms before it, or the whole wait before it when --match waited for its
    target (14.5 s on captures/jack-shapes-recorder-first.ssf)."""
    from analyses.source import capture_origin_ns

    origin_ns = capture_origin_ns(cap)
    origin_ns = origin_ns if origin_ns is not None else started_ns
    if not isinstance(origin_ns, int):
        return {}

    def since(t_ns: int) -> str:  # a server already up is attached while the recorder starts
        s = (int(t_ns) - origin_ns) / 1e9
        return f"{s:.3f} s after the start" if s >= 0 else f"{-s:.3f} s before the start"

    if isinstance(engine.get("attachments"), list):
        rows: dict[str, list[str]] = {}
        for attached_ns, ended_ns in engine["attachments"]:
            rows.setdefault("attached", []).append(since(attached_ns))
            if ended_ns is not None:
                rows.setdefault("ended", []).append(since(ended_ns))
        return {label: "; ".join(texts) for label, texts in rows.items()}
    if "events" not in cap.table_names or not alone:
        return {}
    events = cap.table("events", ["t_ns", "kind", "text"])
    out: dict[str, list[str]] = {}
    for row in events[events["kind"].astype(str).isin(list(SOURCE_EVENTS)).to_numpy()].itertuples(index=False):
        label = SOURCE_EVENTS[str(row.kind)]
        out.setdefault(label, []).append(f"{since(int(row.t_ns))}: {row.text}")
    return {label: "; ".join(texts) for label, texts in out.items()}


def _first_column(cap: Capture, name: str) -> list[str] | None:
    from capture.format import SCHEMAS

    schema = SCHEMAS.get(name)
    return [schema.names[0]] if schema is not None else None


def _schedstats_text(sources: dict[str, Any]) -> str:
    compiled = sources.get("schedstats_compiled")
    enabled = sources.get("schedstats_enabled")
    if compiled is False:
        return "not compiled in (no CONFIG_SCHEDSTATS): wait/sleep/block sums unknown"
    if compiled is None:
        return "unknown"
    return "on" if enabled else "compiled in, off (kernel.sched_schedstats=0)"


def _ebpf_text(live: Any, stats: dict[str, Any] | None) -> str:
    if not live:
        return _yes_no(live)
    if not stats:
        return "yes (event counts unknown: no trailer)"
    events = sum(stats.get("events", {}).values())
    lost = stats.get("lost_total", 0)
    return f"yes: {events} events, {lost} lost" + (" (some exact intervals are unknown)" if lost else "")


def _missed_text(trailer: dict[str, Any]) -> str:
    missed = trailer.get("missed_ticks")
    ticks = trailer.get("ticks")
    if missed is None:
        return "unknown"
    text = f"{missed} ({100.0 * missed / (ticks + missed):.3f} %)" if ticks else str(missed)
    lost = trailer.get("lost_ticks")
    if lost:  # read, but never reached the file (a writer that fell behind, or the end came first)
        text += f"; lost {lost} ({100.0 * lost / max(1, ticks or 0):.3f} % of the ticks read: not in the capture)"
    return text


def _unseen_text(trailer: dict[str, Any]) -> str:
    unseen = trailer.get("threads_unseen_min")
    if not isinstance(unseen, int):  # older captures did not count them
        return "unknown (not counted by this capture's recorder)"
    if unseen == 0:
        return "none seen to be missed (a thread living less than a tick could still be)"
    return (
        f"at least {unseen}: started and ended between two thread scans (50 ms apart), so never sampled "
        "(from each process's thread count at every tick; eBPF would count them exactly)"
    )


def _cpu_text(trailer: dict[str, Any]) -> str:
    duration = trailer.get("duration_ns") or 0
    parts = []
    for key, label in (
        ("sampler_cpu_ns", "sampler"),
        ("tick_reads_cpu_ns", "of which the tick's /proc reads"),
        ("writer_cpu_ns", "writer"),
        ("writer_decode_cpu_ns", "writer after the recording (the eBPF sampler's rows)"),
    ):
        value = trailer.get(key)
        if value is None:
            continue
        during = key != "writer_decode_cpu_ns"  # after the end: no share of the recording's time
        pct = f" ({100.0 * value / duration:.1f} % of a core)" if duration and during else ""
        parts.append(f"{label} {fmt_ns(value)}{pct}")
    return "; ".join(parts) or "unknown"
