#!/usr/bin/env bash
# Installs what the test suite needs on a Debian 12 machine, as root: the apt packages (real engines,
# BCC, a browser for the report test) and a virtual environment `.venv` with the toolkit and its test
# extra. Debian's own Python is "externally managed" (PEP 668): pip installs go into the venv, never
# into the system. BCC's Python module comes from apt (python3-bpfcc) and is found from the venv by
# the toolkit itself; the PyPI package named "bcc" is unrelated and never installed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "tests/install-deps.sh: run as root (it installs apt packages and the tests need root)" >&2
    exit 2
fi

APT_PACKAGES=(
    python3-venv      # Debian's python3 has no ensurepip without it
    gcc               # bench/ C helpers used by tests
    python3-bpfcc     # BCC's Python module (never the unrelated PyPI "bcc")
    bpfcc-tools
    libbpfcc
    util-linux        # setpriv, unshare: the no-privilege and tracefs-mount tests
    chromium          # the report test opens the html report headless and looks for console errors
    jackd2            # the real-graph incident test: jackd on its dummy driver, jack_lsp/connect/wait
    fluidsynth        # a real JACK client with a 100 ms nice-19 housekeeping thread
    timgm6mb-soundfont  # fluidsynth's soundfont (tests/real_graph.py)
    jalv              # LV2 host: the graph's clients in series
    x42-plugins       # the LV2 plugin they host (balance)
)

export DEBIAN_FRONTEND=noninteractive
# jackd2 asks whether to allow real-time limits; the tests run as root and need no limits file.
echo "jackd2 jackd/tweak_rt_limits boolean false" | debconf-set-selections
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${APT_PACKAGES[@]}"

# BCC's TRACEPOINT_PROBE reads event formats from tracefs; some systems do not mount it at boot.
if [ ! -d /sys/kernel/tracing/events ]; then
    mount -t tracefs nodev /sys/kernel/tracing
    echo "install-deps: mounted tracefs at /sys/kernel/tracing"
fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
echo "install-deps: ready; run the tests with .venv/bin/python -m pytest"
