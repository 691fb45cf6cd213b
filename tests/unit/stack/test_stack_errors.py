"""The local stack names the fix when something is missing."""

import pytest

from gpuledger.stack import KafkaBroker, StackError


def test_missing_jars_name_the_make_target(tmp_path, monkeypatch):
    broker = KafkaBroker(tmp_path / "home", "127.0.0.1:1", tmp_path / "no-jars")
    with pytest.raises(StackError, match="make kafka-jars"):
        broker.up(wait_s=1)


def test_missing_java_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    broker = KafkaBroker(tmp_path / "home", "127.0.0.1:1", tmp_path)
    with pytest.raises(StackError, match="java not found"):
        broker.up(wait_s=1)
