"""The worker's and the fleet exporter's metric logic without services: lag and event-time
arithmetic, failure classes, and what the exporter does when ClickHouse fails."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuledger.domain.quota import Quota
from gpuledger.sinks.base import StoreError
from gpuledger.sinks.fleet_metrics import FAMILIES, FleetExporter, quota_at, reason_class
from gpuledger.streams.metrics import WorkerMetrics
from gpuledger.streams.metrics import reason_class as dead_letter_class


def samples(registry) -> dict[tuple[str, tuple], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_lag_is_end_minus_next_offset_never_negative():
    m = WorkerMetrics()
    m.positions({"p.source.dcgm:0": (0, 100), "p.source.dcgm:1": (40, 50), "p.source.dcgm:2": (0, 10)},
                {"p.source.dcgm:0": 70, "p.source.dcgm:2": 12}, {}, [])
    got = samples(m.registry)
    lag = {dict(k)["partition"]: v for (n, k), v in got.items() if n == "gpuledger_worker_consumer_lag_records"}
    assert lag == {"0": 30, "1": 10, "2": 0}  # 1: nothing read yet, counted from the low offset


def test_last_event_time_is_the_newest_partition_of_each_source_topic():
    m = WorkerMetrics()
    m.positions({}, {}, {"p.source.dcgm:0": 5_000, "p.source.dcgm:1": 9_000, "p.source.k8s-watch:0": 7_000},
                ["p.source.dcgm", "p.source.k8s-watch", "p.source.vgpu"])
    got = {dict(k)["topic"]: v for (n, k), v in samples(m.registry).items()
           if n == "gpuledger_source_last_event_timestamp_seconds"}
    assert got == {"p.source.dcgm": 9.0, "p.source.k8s-watch": 7.0}  # vgpu: nothing read, no series


def test_dead_letters_are_forwarded_and_counted_by_class():
    m, sent = WorkerMetrics(), []
    send = m.counting_dead_letters(lambda *a: sent.append(a))
    send("t/0@1", "CodecError: bad magic byte 0x6e", b"x")
    send("t/0@2", "CodecError: truncated", b"y")
    send("t/1@3", "not a class: free text", b"z")
    assert [s[0] for s in sent] == ["t/0@1", "t/0@2", "t/1@3"]
    got = {dict(k)["reason"]: v for (n, k), v in samples(m.registry).items()
           if n == "gpuledger_worker_dead_letters_total"}
    assert got == {"CodecError": 2, "other": 1}
    assert dead_letter_class("KeyError: 'node'") == "KeyError"


def test_store_errors_counted_by_kind_and_skipped_series_by_reason():
    m = WorkerMetrics()
    m.store_error(transient=True)
    m.store_error(transient=True)
    m.store_error(transient=False)
    m.skipped({"implausible power (not in [0, 100000) W)": 2})
    m.skipped({"implausible power (not in [0, 100000) W)": 1, "DCGM blank sentinel": 4})
    got = samples(m.registry)
    assert got[("gpuledger_worker_store_errors_total", (("kind", "transient"),))] == 2
    assert got[("gpuledger_worker_store_errors_total", (("kind", "permanent"),))] == 1
    assert got[("gpuledger_worker_dcgm_series_skipped_total",
                (("reason", "implausible power (not in [0, 100000) W)"),))] == 3
    assert got[("gpuledger_worker_dcgm_series_skipped_total", (("reason", "DCGM blank sentinel"),))] == 4


def test_facts_counted_per_table_and_flush_timed():
    m = WorkerMetrics()
    m.flushed(3, 10, 2, 0, 7, 0.02)
    m.flushed(1, 0, 0, 1, 0, 0.5)
    got = samples(m.registry)
    facts = {dict(k)["table"]: v for (n, k), v in got.items() if n == "gpuledger_worker_facts_written_total"}
    assert facts == {"capacity_facts": 4, "utilization_facts": 10, "request_facts": 2, "demand_facts": 1}
    assert got[("gpuledger_worker_flush_seconds_count", ())] == 2
    assert got[("gpuledger_worker_flush_seconds_sum", ())] == pytest.approx(0.52)
    assert got[("gpuledger_worker_pending_samples", ())] == 0


@pytest.mark.parametrize("reason, cls", [
    ("namespace ml has no gpuledger.io/tenant label", "namespace_without_tenant"),
    ("namespace ml unknown at that time", "namespace_unknown"),
    ("no pod ml/job-0 known at the snapshot time", "pod_unknown"),
    ("device GPU-1 is not in the inventory", "device_not_in_inventory"),
    ("vGPU profile A100-4C has no approved weight in the inventory", "vgpu_profile_not_approved"),
    ("VM vm-2 has no owner", "vm_without_owner"),
    ("something new", "other"),
])
def test_unattribution_reasons_become_bounded_classes(reason, cls):
    assert reason_class(reason) == cls


def test_quota_in_force_is_the_latest_that_started():
    quotas = [Quota("alpha", "H100", 2, 0, None), Quota("alpha", "H100", 5, 100, 200),
              Quota("beta", "H100", 9, 0, None)]
    assert [quota_at(quotas, "alpha", "H100", t) for t in (50, 150, 250)] == [2, 5, 2]
    assert quota_at(quotas, "gamma", "H100", 50) == 0


def test_exporter_lists_every_family_and_counts_failed_refreshes():
    def refuse():
        raise StoreError("ClickHouse unreachable")

    exporter = FleetExporter(refuse)
    assert exporter.refresh(1_000_000) is False
    names = {f.name for f in exporter.registry.collect()}
    assert set(FAMILIES) <= names
    got = samples(exporter.registry)
    assert got[("gpuledger_fleet_refresh_errors_total", ())] == 1
    assert got[("gpuledger_fleet_last_refresh_timestamp_seconds", ())] == 0
