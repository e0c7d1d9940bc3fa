"""Where things are, for test modules at any depth of tests/ (they mirror the package's
folders): the repository and the tests' own folder, with its helper modules and DAGs."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
