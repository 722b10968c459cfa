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
    gcc               # bench/ C helpers used by tests; the recorder's compiled tick (setup.py)
    python3-dev       # Python.h for the compiled tick (samplers/_tick.c; tests/test_tick_reads.py wants it built)
    python3-bpfcc     # BCC's Python module (never the unrelated PyPI "bcc")
    bpfcc-tools
    libbpfcc
    util-linux        # setpriv, unshare: the no-privilege and tracefs-mount tests
    chromium          # the report test opens the html report headless and looks for console errors
    jackd2            # real JACK server (dummy driver) for the engine-source tests
    libjack-jackd2-0  # libjack for JACK-Client
    jalv              # LV2 host: real JACK clients
    lsp-plugins-lv2   # LV2 plugins the tests load (series vs chain)
    x42-plugins
    calf-plugins      # issue 22's graph: plugins with MIDI/atom ports left unconnected (bench/real_graph_shapes.py)
    fluidsynth        # a real softsynth client
    timgm6mb-soundfont
    ecasound          # several LV2 plugins in one JACK client (the chain)
    stress-ng
    pipewire          # the PipeWire engine source and its JACK API
    pipewire-bin
    pipewire-jack
)

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# jackd2 asks whether to enable real-time limits: answer before the install, or it stops there.
echo "jackd2 jackd/tweak_rt_limits boolean false" | debconf-set-selections
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
