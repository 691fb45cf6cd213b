"""Store errors on the real engine: what the driver raises is translated into transient or
permanent; a batch the engine refuses for good is bisected so only the refused rows are
rejected; a missing table is nobody's row and is raised, naming the table."""

from dataclasses import replace

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from gpuledger.demo.cluster import write_capture
from gpuledger.domain.facts import FactBatch
from gpuledger.sinks.base import PermanentStoreError, TransientStoreError
from gpuledger.sinks.clickhouse import ClickHouseStore, store_error
from gpuledger.sinks.isolate import write_isolating
from pipeline import run_capture
from plans import truth_plan

pytestmark = pytest.mark.integration


@pytest.fixture
def store(tmp_path):
    s = ClickHouseStore(f"chdb://{tmp_path / 'clickhouse'}")
    s.ensure_schema()
    yield s
    s.close()


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    mp, _ = run_capture(write_capture(truth_plan(hours=1), tmp_path_factory.mktemp("capture")))
    return sorted(mp.store.utilization.values(), key=lambda f: f.fact_id)


def _ids(store: ClickHouseStore, table: str) -> set[str]:
    return {r[0] for r in store.query(f"SELECT fact_id FROM gpuledger.{table} FINAL")[1]}


def test_rows_that_do_not_fit_are_isolated_and_the_rest_written(store, facts):
    bad = {3: replace(facts[3], fb_used_bytes=2 ** 70), 17: replace(facts[17], fb_used_bytes=10 ** 30)}
    batch = [bad.get(i, f) for i, f in enumerate(facts)]
    with pytest.raises(PermanentStoreError, match="does not fit its column"):
        store.write_facts(FactBatch(utilization=batch))  # what the engine says: the whole batch refused
    rejected = []
    assert write_isolating(store, FactBatch(utilization=batch), lambda t, f, e: rejected.append((t, f, e))) == 2
    assert [(t, f.fact_id) for t, f, _ in rejected] == [("utilization_facts", facts[3].fact_id),
                                                        ("utilization_facts", facts[17].fact_id)]
    assert all(isinstance(e, PermanentStoreError) and not e.transient for _, _, e in rejected)
    want = {f.fact_id for f in facts} - {facts[3].fact_id, facts[17].fact_id}
    assert len(want) > 10 and _ids(store, "utilization_facts") == want


def test_a_dropped_table_is_raised_with_its_name_and_nothing_is_rejected(store, facts):
    store.command("DROP TABLE gpuledger.utilization_facts")
    rejected = []
    with pytest.raises(PermanentStoreError, match="utilization_facts") as info:
        write_isolating(store, FactBatch(utilization=facts[:8]), lambda *a: rejected.append(a))
    assert info.value.table == "utilization_facts" and rejected == []
    with pytest.raises(PermanentStoreError, match="UNKNOWN_TABLE|does not exist"):
        store.probe("utilization_facts")


def test_driver_errors_are_classified_by_code():
    assert store_error(OperationalError("connection refused"), "insert").transient
    assert isinstance(store_error(ConnectionRefusedError(111, "refused"), "insert"), TransientStoreError)
    for code in (159, 209, 210, 241, 252, 202, 425):
        assert store_error(DatabaseError(f"Code: {code}.", code=code), "insert").transient, code
    for code in (60, 62, 53, 69, 70, 72, 321):
        assert not store_error(DatabaseError(f"Code: {code}.", code=code), "insert").transient, code
    err = store_error(OverflowError("int too big"), "insert into gpuledger.x failed", "x")
    assert isinstance(err, PermanentStoreError) and err.table == "x" and "does not fit" in str(err)
