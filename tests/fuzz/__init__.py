"""The fuzz suite of issue #20 (``python -m tests.fuzz``; :mod:`tests.fuzz.runner` for the
contract): seeded hostile inputs for every command, each run as a subprocess and classified."""
