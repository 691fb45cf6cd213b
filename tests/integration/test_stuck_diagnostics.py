"""A command that has not ended when a test gives up on it says where it waits: every process of
it (the `process` supervisor and its workers) prints its threads' Python stacks on SIGUSR1
before it is killed, so a hang seen once in CI names its place."""

import uuid

import pytest

from conftest import Stack

pytestmark = pytest.mark.integration


def test_a_command_past_its_timeout_prints_the_stacks_of_every_process(broker, tmp_path):
    stack = Stack(tmp_path / "live", f"t{uuid.uuid4().hex[:10]}")
    with pytest.raises(AssertionError) as failed:
        stack.run("process", "--workers", "1", timeout=20)  # live: never ends by itself
    text = str(failed.value)
    assert "still running after 20 s" in text
    assert text.count("Current thread") >= 2, text[-3000:]  # the supervisor and the worker
    assert "run_sink" in text and "runtime.py" in text, text[-3000:]
