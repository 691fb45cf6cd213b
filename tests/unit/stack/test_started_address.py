"""The address of the broker a home started: what a test run reuses, and nothing else."""

import os
import subprocess
import sys

from gpuledger.stack import KafkaBroker


def _home_with_config(tmp_path, port: int):
    home = tmp_path / "home"
    KafkaBroker(home, f"127.0.0.1:{port}", tmp_path)._write_config()
    return home


def test_a_living_broker_of_the_home_gives_its_address(tmp_path):
    home = _home_with_config(tmp_path, 40123)
    (home / "kafka" / "broker.pid").write_text(str(os.getpid()))
    assert KafkaBroker.started_address(home) == "127.0.0.1:40123"


def test_a_home_whose_broker_ended_gives_none(tmp_path):
    home = _home_with_config(tmp_path, 40124)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (home / "kafka" / "broker.pid").write_text(ended.stdout.strip())
    assert KafkaBroker.started_address(home) is None


def test_a_home_that_never_started_a_broker_gives_none(tmp_path):
    assert KafkaBroker.started_address(tmp_path / "empty") is None
    home = _home_with_config(tmp_path, 40125)  # set up, never started: no pid file
    assert KafkaBroker.started_address(home) is None
