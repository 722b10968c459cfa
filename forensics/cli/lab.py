"""`forensics lab`: run the built-in workload that makes real stalls of known cause (the lab package).

The command is defined once, in forensics.lab.cli, so that `python -m forensics.lab` (what `catch-load --lab`
launches) takes exactly the same options.
"""

from forensics.lab.cli import lab_command as lab

__all__ = ["lab"]
