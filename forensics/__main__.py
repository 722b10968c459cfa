"""`python -m forensics ...` is the `forensics` command (tests use it to run the worktree's own code)."""

from forensics.cli import main

main()
