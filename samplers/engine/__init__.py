"""Engine sources: the audio engine's own records (xruns, cycles, clients, graph), recorded beside the threads."""
