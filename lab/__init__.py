"""The lab: an audio-engine-like workload that makes real spikes and stalls of known cause."""
