"""A DSN is printed (stack up, stack status, store errors) with its password masked."""

import pytest

from gpuledger.config.settings import load_settings, redact_dsn


@pytest.mark.parametrize("dsn, shown", [
    ("http://admin:s3cret@clickhouse:8123", "http://admin:***@clickhouse:8123"),
    ("https://reader:p%40ss@h:8443/db?secure=1&password=s3cret", "https://reader:***@h:8443/db?secure=1&password=***"),
    ("http://h:8123", "http://h:8123"),
    ("chdb:///var/lib/gpuledger/clickhouse", "chdb:///var/lib/gpuledger/clickhouse"),
    ("http://user@h:8123", "http://user@h:8123"),
])
def test_passwords_are_masked(dsn, shown):
    assert redact_dsn(dsn) == shown


def test_settings_show_the_masked_dsn(tmp_path):
    s = load_settings(home=tmp_path, clickhouse_dsn="http://admin:s3cret@clickhouse:8123")
    assert "s3cret" not in s.shown_dsn() and "s3cret" in s.effective_dsn()
