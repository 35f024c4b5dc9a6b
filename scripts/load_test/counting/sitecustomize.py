"""Imported by every Python process started with this folder on its PYTHONPATH (the load test's
stack): a function process counts its operations (scripts/load_test/operations.py)."""

import contextlib
import sys

# A process without the repository on its path (an emulator's) counts nothing.
with contextlib.suppress(ImportError):
    from scripts.load_test.operations import install_from_environment

    install_from_environment(sys.argv)
