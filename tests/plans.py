"""Hand-made cluster plans whose truth is known by construction (tests/README in each test)."""

from __future__ import annotations

from gpuledger.demo.builder import GpuSpec, det_uuid, gpu_uuid
from gpuledger.demo.cluster import ClusterPlan, NamespacePlan, PodPlan
from gpuledger.domain.timeutil import parse_rfc3339_ms

H = 3_600_000
M = 60_000
T0 = parse_rfc3339_ms("2026-10-01T00:00:00Z")


def pod(ns: str, name: str, node: str, gpus: tuple[int, ...], a_min: int, b_min: int, sm: float, gen: int = 0) -> PodPlan:
    return PodPlan(ns, name, det_uuid("pod", ns, name, gen), node, gpus, T0 + a_min * M, T0 + b_min * M, sm)


def truth_plan(hours: int = 3) -> ClusterPlan:
    """2 nodes x 4 GPUs, 3 tenants, over ``hours`` hours:

    - ``alpha-ns`` (tenant alpha) runs a 2-GPU pod for 60 min and a 1-GPU pod for 90 min;
    - ``shared`` changes owner from beta to gamma at 60 min; its pod holds 1 GPU 30..150 min;
    - ``scratch`` is deleted at 70 min and re-created (new UID) for gamma at 75 min; the pod
      name ``trainer-0`` runs under beta 10..60 min and again under gamma 80..140 min;
    - GPU b3 is never allocated; GPU b2 is in maintenance 120..150 min;
    - GPU a0 has no telemetry 20..40 min (while alpha's pod holds it).
    """
    end = T0 + hours * H
    nodes = {n: [GpuSpec(gpu_uuid("truth", n, i), n, i) for i in range(4)] for n in ("node-a", "node-b")}
    namespaces = [
        NamespacePlan("alpha-ns", det_uuid("ns", "alpha"), T0 - 24 * H, ((T0 - 24 * H, "alpha"),)),
        NamespacePlan("shared", det_uuid("ns", "shared"), T0 - 24 * H, ((T0 - 24 * H, "beta"), (T0 + 60 * M, "gamma"))),
        NamespacePlan("scratch", det_uuid("ns", "scratch", 1), T0 - 24 * H, ((T0 - 24 * H, "beta"),),
                      deleted_ms=T0 + 70 * M),
        NamespacePlan("scratch", det_uuid("ns", "scratch", 2), T0 + 75 * M, ((T0 + 75 * M, "gamma"),)),
    ]
    pods = [
        pod("alpha-ns", "train-0", "node-a", (0, 1), 0, 60, 0.8),
        pod("alpha-ns", "eval-0", "node-a", (2,), 30, 120, 0.3),
        pod("shared", "notebook-0", "node-b", (0,), 30, 150, 0.5),
        pod("scratch", "trainer-0", "node-b", (1,), 10, 60, 0.9, gen=1),
        pod("scratch", "trainer-0", "node-b", (1,), 80, 140, 0.6, gen=2),
    ]
    return ClusterPlan(
        start_ms=T0, end_ms=end, nodes=nodes, namespaces=namespaces, pods=pods,
        telemetry_gaps=[(nodes["node-a"][0].uuid, T0 + 20 * M, T0 + 40 * M)],
        unavailable=[(nodes["node-b"][2].uuid, T0 + 120 * M, T0 + 150 * M, "maintenance")],
    )


def expected_allocated_hours(plan: ClusterPlan) -> dict[str, float]:
    """Per tenant, from the plan alone: pod duration x GPUs, split where the owner changes."""
    out: dict[str, float] = {}
    for p in plan.pods:
        t = p.start_ms
        while t < p.end_ms:
            ns = plan.namespace(p.namespace, t)
            tenant = ns.tenant_at(t)
            nxt = min([p.end_ms] + [a for a, _ in ns.owners if t < a < p.end_ms])
            out[tenant] = out.get(tenant, 0.0) + len(p.gpus) * (nxt - t) / H
            t = nxt
    return out


def expected_active_hours(plan: ClusterPlan) -> dict[str, float]:
    """Per tenant: sum over samples the plan emits of span x SM-active."""
    out: dict[str, float] = {}
    gaps = plan.telemetry_gaps
    for p in plan.pods:
        gpus = plan.nodes[p.node]
        for t in range(p.start_ms, p.end_ms, plan.scrape_every_ms):
            tenant = plan.namespace(p.namespace, t).tenant_at(t)
            for i in p.gpus:
                if any(u == gpus[i].uuid and a <= t < b for u, a, b in gaps):
                    continue
                out[tenant] = out.get(tenant, 0.0) + p.sm_at(i, t) * plan.scrape_every_ms / H
    return out
