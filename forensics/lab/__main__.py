"""`python -m forensics.lab [OPTIONS]`: the same command as `forensics lab` (catch-load --lab launches this).

The environment is set before anything imports numpy or pyarrow: with it, their thread pools never start,
and the engine process holds only the threads the lab means (see forensics.lab.engine.QUIET_LIBRARIES).
"""

import os

from forensics.lab.engine_env import QUIET_LIBRARIES

for _name, _value in QUIET_LIBRARIES.items():
    os.environ.setdefault(_name, _value)

from forensics.lab.cli import main  # noqa: E402 - after the environment, on purpose

main()
