# Tests and benchmarks. Benchmarks are run by hand on an otherwise idle machine; their figures are
# written to bench/out/ and quoted in the README (side by side, as ratios).
PYTHON ?= python3

.PHONY: man test lint bench bench-sampler bench-churn bench-analyses bench-exact bench-lab bench-pipewire bench-startup bench-flight bench-accuracy bench-stop bench-resync
test:
	$(PYTHON) -m pytest

lint:  # what .ci/run checks before the tests: the layering contracts, types, style
	lint-imports && mypy && ruff check . && ruff format --check .

bench: bench-sampler bench-churn bench-analyses bench-exact bench-lab bench-accuracy bench-stop bench-resync

bench-sampler:
	$(PYTHON) bench/sampler_bench.py

bench-churn:
	$(PYTHON) bench/churn_bench.py

bench-analyses:
	$(PYTHON) bench/analyses_bench.py

bench-exact:  # root: taskstats, BCC start, ring-buffer rate against loss, recording cost per source
	$(PYTHON) bench/bench_exact.py

bench-lab:
	$(PYTHON) bench/lab_fidelity.py --repeat 3
	$(PYTHON) bench/lab_topology.py --stages 4 --seconds 10 --repeat 3

bench-pipewire:  # a headless PipeWire: what the PipeWire source costs the graph
	$(PYTHON) bench/pipewire_source_cost.py

bench-startup:  # catch-load --help with and without pandas loaded
	$(PYTHON) bench/recorder_startup.py

man:  # docs/man/*.1 from the commands' help (click-man); installed with the package
	$(PYTHON) docs/make_man.py

bench-flight:  # the flight recorder beside plain recording: RSS over 10 minutes, CPU
	$(PYTHON) bench/flight_bench.py

bench-accuracy:  # the verdicts' recall and precision on live lab recordings (the figures the tests no longer assert)
	$(PYTHON) bench/lab_accuracy.py

bench-stop:  # root: seconds from a stop signal to catch-load's exit
	$(PYTHON) bench/stop_latency.py

bench-resync:  # reading past damage: 100 MB of random bytes, crafted fake headers of 1, 4, 16 MB
	$(PYTHON) bench/resync_bench.py
