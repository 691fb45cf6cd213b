"""Integration fixtures: the real broker and engine (see tests/stack_support.py)."""

from stack_support import BOOTSTRAP, GPULEDGER, LIBS, REPO, Stack, broker, stack, stop, wait_for  # noqa: F401
