"""`replay --into NAME` drops and rebuilds NAME: it refuses ClickHouse's own databases, the live
one, and any database holding tables a replay did not create."""

import pytest

from gpuledger.replay.run import ReplayError, check_shadow_droppable, check_shadow_name
from gpuledger.sinks.clickhouse import ClickHouseStore

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["default", "DEFAULT", "gpuledger", "system", "system_x", "INFORMATION_SCHEMA",
                                  "a-b", "x; DROP TABLE t", ""])
def test_reserved_and_malformed_names_are_refused(name):
    with pytest.raises(ReplayError):
        check_shadow_name(name)


def test_a_database_with_foreign_tables_is_not_dropped(tmp_path):
    store = ClickHouseStore(f"chdb://{tmp_path / 'clickhouse'}")
    try:
        store.ensure_schema()
        shadow = store.sibling("shadow_a")
        check_shadow_droppable(shadow)  # absent: fine
        shadow.ensure_schema()
        check_shadow_droppable(shadow)  # a previous replay's: fine
        store.command("CREATE DATABASE analysts")
        store.command("CREATE TABLE analysts.notes (a Int8) ENGINE = MergeTree ORDER BY a")
        with pytest.raises(ReplayError, match="notes"):
            check_shadow_droppable(store.sibling("analysts"))
        assert store.query("EXISTS TABLE analysts.notes")[1] == [(1,)]
    finally:
        store.close()
