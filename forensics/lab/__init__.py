"""The lab: an audio-engine-like workload that makes real spikes and stalls of known cause.

Run it with `forensics lab` or `python -m forensics.lab` (the same options; `catch-load --lab` launches the latter).
How the package is laid out, in the order data flows:

    settings.py   options -> LabSettings (checked; ForensicsError for bad ones) and back to a command line
    schedule.py   LabSettings -> the deterministic plan: which callback gets which episode
    engine.py     runs the plan: lab-main, the lab-audio callback thread, helper processes; the truth log
    episodes.py   what lab-audio does in an episode of each cause (run, runqueue, io, fault, lock)
    helpers.py    the helper processes: series stages, the runqueue competitor, the lock holder
    dsp.py        the callback's real work: seeded FIR stages over seeded noise, bit-identical anywhere
    shared.py     memory shared with the helpers (futex words, audio buffers)
    linux.py      the Linux calls the standard library lacks (thread names, absolute sleeps, futexes)
    truth.py      the truth JSON: written by the engine, read back as pandas DataFrames
    cli.py        the click command
"""
