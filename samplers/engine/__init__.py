"""Engine sources: the audio engine's own records (xruns, cycles, clients, graph), recorded beside the threads.

Each source runs in a process of its own and sends frames (samplers.frames: TABLE rows of the engine
tables of capture.format, EVENT rows, META patches) to the writer on a pipe of their own, and the
pids of the engine's clients, one per line, to the recorder's discovery. Nothing passes through the tick.

meta["sources"]["engine"], shared by every engine source (keys that do not apply are left out):
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
