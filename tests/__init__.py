"""The test suite: a package, so its modules import one another as tests.*."""
