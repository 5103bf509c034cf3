"""The repository's scripts (run by the Makefile): importable so that tests can check them."""
