"""The source systems' versions a closed period names, read from the DCGM topic at the
period's edges on the real broker: a driver upgraded mid-period shows both versions, records
outside the period do not count, and what the sources never say is listed as such."""

import uuid
from pathlib import Path

import pytest

from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.bus.sample import window_edges
from gpuledger.domain.source_versions import NOT_IN_EVIDENCE, exposition_versions
from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.ledger.source_versions import kafka_edges, source_versions
from gpuledger.schemas import Codec
from gpuledger.sinks.clickhouse import ClickHouseStore
from stack_support import BOOTSTRAP

pytestmark = pytest.mark.integration

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm" / "dcgm-metrics-k8s-h100.txt"  # the real scrape, copied
OCT, NOV = parse_rfc3339_ms("2026-10-01T00:00:00Z"), parse_rfc3339_ms("2026-11-01T00:00:00Z")
H = 3_600_000


def _scrape(driver: str, model: str = "NVIDIA H100 80GB HBM3") -> str:
    labels = f'gpu="0",UUID="GPU-1",modelName="{model}",Hostname="n1",DCGM_FI_DRIVER_VERSION="{driver}"'
    return ("# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
            f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} 300.0\n")


def test_the_real_exporter_scrape_names_its_driver_and_gpu_model():
    found = exposition_versions(REFERENCE.read_text())
    assert found == {"nvidia_driver": {"580.105.08"}, "gpu_model": {"NVIDIA H100 80GB HBM3"}}


def test_a_mid_period_driver_upgrade_shows_both_versions_and_only_the_period_counts(broker, tmp_path):
    topic = f"gpltest-{uuid.uuid4().hex[:8]}.source.dcgm"
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    pub, codec = KafkaPublisher(BOOTSTRAP), Codec("dcgm_scrape")
    records = [(OCT - H, "570.0"), *[(OCT + i * H, "580.105.08") for i in range(60)],  # September's is not October's
               *[(OCT + (360 + i) * H, "580.126.09") for i in range(60)], (NOV + H, "590.1")]
    for i, (t, driver) in enumerate(records):
        node = f"n{i % 2}"
        pub.publish(topic, node.encode(), codec.encode({"observed_at_ms": t, "ingested_at_ms": t, "cluster_id": "c1",
                                                       "node": node, "exposition": _scrape(driver)}), t, i % 2)
    pub.flush()
    config = {"bootstrap.servers": BOOTSTRAP}
    edges = window_edges(config, topic, OCT, NOV, per_edge=20)
    assert len(edges) == 4 * 20, "20 records at each edge of each of the 2 partitions"
    store = ClickHouseStore(f"chdb://{tmp_path / 'clickhouse'}")
    store.ensure_schema()
    try:
        doc = source_versions(store, kafka_edges(config), topic, OCT, NOV)
        assert doc["nvidia_driver"] == ["580.105.08", "580.126.09"]
        assert doc["gpu_model"] == ["NVIDIA H100 80GB HBM3"]
        assert doc["not_in_evidence"] == NOT_IN_EVIDENCE and "80 scrapes" in doc["read"]
        offline = source_versions(store, None, topic, OCT, NOV)
        assert "nvidia_driver" not in offline and "not read" in offline["read"]
    finally:
        store.close()
