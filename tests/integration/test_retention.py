"""Retention by role, as the broker holds it: source and dead-letter topics keep evidence
for the audit horizon (from the settings); the reference topic keeps every document forever
(never compacted: a replay of a closed period reads the documents as they were)."""

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from conftest import BOOTSTRAP

pytestmark = pytest.mark.integration


def test_topics_are_created_with_retention_by_role(stack):
    stack.extra_env["GPULEDGER_AUDIT_RETENTION_DAYS"] = "30"
    stack.run("stack", "up")
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    names = {role: f"{stack.prefix}.{role}" for role in (
        "source.k8s-watch", "source.podresources", "source.dcgm", "source.vgpu", "source.requests",
        "reference.documents", "dead-letter")}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names.values()]
    configs = {r.name: {k: v.value for k, v in f.result().items()}
               for r, f in admin.describe_configs(resources).items()}
    thirty_days = str(30 * 24 * 3600 * 1000)
    for role, name in names.items():
        c = configs[name]
        if role == "reference.documents":
            assert (c["cleanup.policy"], c["retention.ms"], c["retention.bytes"]) == ("delete", "-1", "-1")
        else:
            assert (c["cleanup.policy"], c["retention.ms"]) == ("delete", thirty_days), role
        if role.startswith("source."):
            assert c["message.timestamp.type"] == "CreateTime"  # the record time is observed_at
