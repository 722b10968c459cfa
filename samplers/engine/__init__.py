"""Engine sources: the audio engine's own records (xruns, cycles, clients, graph), recorded beside the threads.

Each source runs in a process of its own and sends frames (samplers.frames: TABLE rows of the engine
tables of capture.format, EVENT rows, META patches) to the writer on a pipe of their own, and the
pids of the engine's clients, one per line, to the recorder's discovery. Nothing passes through the tick.

meta["sources"]["engines"] holds each engine source's own metadata by its kind ("jack", "pipewire": a
recording can run both, e.g. a JACK server beside PipeWire), and meta["sources"]["engine"] the one that
recorded (the last to speak that was not unavailable; the only one in a recording with one source, and in
captures from before "engines"). Each of them (keys that do not apply are left out):
    kind                  "jack" | "pipewire"
    version               the engine's version as it reports it ("jack2 1.9.21")
    server                the server/instance name recorded
    clock                 (or jack_clock) the engine's clock, e.g. "CLOCK_MONOTONIC_RAW"
    clock_offset_ns       capture clock (CLOCK_MONOTONIC) minus engine clock, measured at start, and
    clock_offset_uncertainty_ns, clock_offset_drift_ns   half the tightest bracket; max - min over the run
    cycles                where engine_cycles/engine_nodes come from, or "not recorded: WHY"
    dsp_load              what dsp_load_percent is (JACK: cpu_load(), smoothed)
    unavailable           set instead of the rest when the source could not run: the one-line reason
The source's lifecycle is in `events`: engine_source_started, engine_source_unavailable,
engine_source_ended (with the reason: recording ended, the server went away, a failure).
"""

from __future__ import annotations

from typing import Any


def merge_sources(sources: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`sources` (meta["sources"]) with a patch's sources merged in: an engine source's metadata is kept
    by its kind, never written over by another engine's (module docstring)."""
    out = {**sources, **{k: v for k, v in patch.items() if k != "engine"}}
    engine = patch.get("engine")
    if not isinstance(engine, dict):
        return out
    engines = dict(sources.get("engines") or {})
    old = sources.get("engine")
    if isinstance(old, dict) and old.get("kind") not in engines:  # written before this merge kept kinds
        engines[str(old.get("kind"))] = old
    engines.pop(str(engine.get("kind")), None)  # re-inserted: the order is the order they last spoke in
    engines[str(engine.get("kind"))] = engine
    out["engines"] = engines
    recorded = [e for e in engines.values() if not e.get("unavailable")]
    # The last to speak, unless it could not record and another did.
    out["engine"] = engine if not engine.get("unavailable") or not recorded else recorded[-1]
    return out
