"""The inventory's per-node lookups follow the entries in force: worked out once per node, and
again whenever the list of entries is replaced or grows."""

from gpuledger.domain.inventory import GpuEntry, parse_inventory
from gpuledger.domain.timeutil import parse_rfc3339_ms


def _doc(*gpus: tuple[str, str, str | None]) -> dict:
    return {"gpus": [{"gpu_uuid": u, "node": n, "valid_from": "2026-11-01T00:00:00Z", **({"valid_to": e} if e else {})}
                     for u, n, e in gpus]}


def test_node_end_is_the_last_gpu_leaving_and_none_while_one_stays():
    inv = parse_inventory(_doc(("GPU-1", "a", "2026-11-10T00:00:00Z"), ("GPU-2", "a", "2026-11-12T00:00:00Z"),
                               ("GPU-3", "b", "2026-11-10T00:00:00Z"), ("GPU-4", "b", None)))
    for _ in range(2):  # worked out, then answered from the index
        assert inv.node_end_ms("a") == parse_rfc3339_ms("2026-11-12T00:00:00Z")
        assert inv.node_end_ms("b") is None
        assert inv.node_end_ms("c") is None


def test_node_end_follows_the_entries_when_they_change():
    inv = parse_inventory(_doc(("GPU-1", "a", "2026-11-10T00:00:00Z")))
    assert inv.node_end_ms("a") == parse_rfc3339_ms("2026-11-10T00:00:00Z")
    inv.gpus.append(GpuEntry("GPU-2", "a", "H100", "H100", "exclusive", 0, None))  # the list grows
    assert inv.node_end_ms("a") is None
    inv.gpus = [GpuEntry("GPU-2", "a", "H100", "H100", "exclusive", 0, 5_000)]  # the list replaced
    assert inv.node_end_ms("a") == 5_000
