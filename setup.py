"""Build entry point; metadata and tool settings live in pyproject.toml."""
from setuptools import setup

setup()
