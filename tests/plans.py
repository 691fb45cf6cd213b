"""Hand-made cluster plans whose truth is known by construction (tests/README in each test)."""

from __future__ import annotations

from dataclasses import replace

from gpuledger.demo.builder import GpuSpec, det_uuid, gpu_uuid
from gpuledger.demo.cluster import ClusterPlan, NamespacePlan, PodPlan
from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms

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
        quotas=[{"tenant_id": "alpha", "gpu_class": "H100-80GB", "guaranteed_gpus": 1, "valid_from": "2026-10-01T00:00:00Z",
                 "valid_to": None, "borrow_limit_gpus": 2},
                {"tenant_id": "gamma", "gpu_class": "H100-80GB", "guaranteed_gpus": 2, "valid_from": "2026-10-01T00:00:00Z",
                 "valid_to": None}],
    )


# alpha holds 2 GPUs 0..60 and 1 GPU 30..120 with 1 guaranteed; beta has no quota;
# gamma never holds more than its 2 guaranteed.
QUOTA_TRUTH = {"alpha": (2.0, 0.5 * 1 + 0.5 * 2), "beta": (0.0, 0.5 + 50 / 60), "gamma": (2.5, 0.0)}


def preemption_plan() -> ClusterPlan:
    """``truth_plan`` where the cluster ends two pods: alpha's 2-GPU ``train-0`` (0..60 min) is
    preempted, beta's ``trainer-0`` (1 GPU, 10..60 min) is evicted."""
    plan = truth_plan()
    how = {("alpha-ns", "train-0"): "preempted", ("scratch", "trainer-0", T0 + 10 * M): "evicted"}
    pods = [replace(p, disrupted=how.get((p.namespace, p.name)) or how.get((p.namespace, p.name, p.start_ms)) or "")
            for p in plan.pods]
    return replace(plan, pods=pods)


# alpha (quota 1) holds train-0's 2 GPUs 0..60 min and eval-0's 1 GPU 30..120 min. 0..30: half of
# train-0 is guaranteed (0.5 h guaranteed, 0.5 h borrowed); 30..60: a third (1/3 h, 2/3 h).
# beta has no quota: trainer-0's 50 min are borrowed.
PREEMPTION_TRUTH = {"alpha": ("preempted", 2.0, 0.5 + 2 / 3), "beta": ("evicted", 50 / 60, 50 / 60)}


def scheduler_plan() -> ClusterPlan:
    """``truth_plan`` where GPU pods wait for the scheduler (created, bound, running at the
    instants below, as the API server writes them: PodScheduled, the container's startedAt),
    with priority classes; alpha's 8-GPU job is never bound and gamma's ``stuck-0`` is bound but
    never starts. What each pod held is unchanged."""
    plan = truth_plan()
    timing = {  # (namespace, name, start): (created, bound, priority class, priority)
        ("alpha-ns", "eval-0", T0 + 30 * M): (T0 + 12 * M, T0 + 28 * M, "batch-low", 100),
        ("shared", "notebook-0", T0 + 30 * M): (T0 + 25 * M, T0 + 29 * M + 30_000, "interactive", 1000),
        ("scratch", "trainer-0", T0 + 10 * M): (T0 + 2 * M, T0 + 9 * M, "", 0),
        ("scratch", "trainer-0", T0 + 80 * M): (T0 + 76 * M, T0 + 79 * M, "", 0),
    }
    pods = []
    for p in plan.pods:
        created, bound, pclass, prio = timing.get((p.namespace, p.name, p.start_ms), (None, None, "", 0))
        pods.append(replace(p, created_ms=created, bound_ms=bound, priority_class=pclass, priority=prio))
    pods += [replace(pod("alpha-ns", "big-8", "", tuple(range(8)), 100, 100, 0.0), created_ms=T0 + 40 * M,
                     priority_class="batch-low", priority=100, never_runs=True),
             replace(pod("scratch", "stuck-0", "node-b", (3,), 110, 110, 0.0, gen=3), created_ms=T0 + 90 * M,
                     bound_ms=T0 + 95 * M, never_runs=True)]
    return replace(plan, pods=pods)


# Per tenant, each wait: (pod, outcome, scheduling delay s, startup delay s, pending s); None: it did not happen.
SCHEDULER_TRUTH = {
    "alpha": [("train-0", "scheduled", 0, 5, 5), ("eval-0", "scheduled", 16 * 60, 120, 18 * 60),
              ("big-8", "ended without running", None, None, 60 * 60)],
    "beta": [("notebook-0", "scheduled", 270, 30, 300), ("trainer-0", "scheduled", 7 * 60, 60, 8 * 60)],
    "gamma": [("trainer-0", "scheduled", 3 * 60, 60, 4 * 60), ("stuck-0", "ended without running", 5 * 60, None, 20 * 60)],
}


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


def sharing_plan() -> ClusterPlan:
    """One MIG H100 (node-m) and one time-sliced H100 with 4 replicas (node-t), 3 hours.

    MIG layout A from 0: 3g.40gb (GI 1) + 3g.40gb (GI 2) + 1g.10gb (GI 7); re-partitioned at
    90 min to layout B: 4g.40gb (GI 1) + 3g.40gb (GI 2). alpha holds A-GI1 0..60 min, beta
    A-GI2 30..90 min, gamma B-GI1 100..150 min; gamma's pod wants-4g waits for a 4g.40gb
    20..80 min, when layout A has none, and is deleted still Pending. On node-t, alpha's pod holds replicas ::0 and
    ::1 for 0..60 min, beta's pod ::2 for 30..120 min.
    """
    from gpuledger.demo.cluster import MigLayout, SharedGpu

    end = T0 + 3 * H
    mig_gpu = GpuSpec(gpu_uuid("sharing", "m"), "node-m", 0)
    ts_gpu = GpuSpec(gpu_uuid("sharing", "t"), "node-t", 0)
    mig = lambda *p: "MIG-" + det_uuid("mig", *p)  # noqa: E731
    layout_a = MigLayout(T0, ((mig("a", 1), "3g.40gb", 1), (mig("a", 2), "3g.40gb", 2), (mig("a", 7), "1g.10gb", 7)))
    layout_b = MigLayout(T0 + 90 * M, ((mig("b", 1), "4g.40gb", 1), (mig("b", 2), "3g.40gb", 2)))
    namespaces = [NamespacePlan(f"{t}-ns", det_uuid("ns", t), T0 - 24 * H, ((T0 - 24 * H, t),))
                  for t in ("alpha", "beta", "gamma")]

    def shared_pod(tenant: str, name: str, devices: tuple[str, ...], node: str, a: int, b: int, sm: float) -> PodPlan:
        return PodPlan(f"{tenant}-ns", name, det_uuid("pod", tenant, name), node, (), T0 + a * M, T0 + b * M, sm, devices)

    pods = [
        shared_pod("alpha", "mig-a", (mig("a", 1),), "node-m", 0, 60, 0.7),
        shared_pod("beta", "mig-b", (mig("a", 2),), "node-m", 30, 90, 0.4),
        shared_pod("gamma", "mig-c", (mig("b", 1),), "node-m", 100, 150, 0.9),
        shared_pod("alpha", "ts-a", (f"{ts_gpu.uuid}::0", f"{ts_gpu.uuid}::1"), "node-t", 0, 60, 0.3),
        shared_pod("beta", "ts-b", (f"{ts_gpu.uuid}::2",), "node-t", 30, 120, 0.2),
        PodPlan("gamma-ns", "wants-4g", det_uuid("pod", "gamma", "wants-4g"), "", (), T0 + 20 * M, T0 + 80 * M, 0.0,
                waits_for_mig="4g.40gb"),
    ]
    return ClusterPlan(start_ms=T0, end_ms=end, nodes={"node-m": [mig_gpu], "node-t": [ts_gpu]},
                       namespaces=namespaces, pods=pods,
                       shared=[SharedGpu(mig_gpu, "mig", layouts=(layout_a, layout_b)),
                               SharedGpu(ts_gpu, "timeslice", replicas=4, layouts=(MigLayout(T0, ()),))])


SHARING_TRUTH = {  # GPU-equivalent hours by tenant and mode, from the plan's docstring
    ("alpha", "mig"): 1.0 * 3 / 7, ("beta", "mig"): 1.0 * 3 / 7, ("gamma", "mig"): 50 / 60 * 4 / 7,
    ("alpha", "timeslice"): 2 * 0.25 * 1.0, ("beta", "timeslice"): 0.25 * 1.5,
}
SHARING_PROFILE_HOURS = {("alpha", "3g.40gb"): 1.0, ("beta", "3g.40gb"): 1.0, ("gamma", "4g.40gb"): 50 / 60}


def expected_sharing_active_hours(plan: ClusterPlan) -> dict[str, float]:
    """MIG: instance weight x instance SM-active; time-slice: 1/N per replica held x the
    physical GPU's SM-active (the sum of its sharing pods, capped at 1)."""
    out: dict[str, float] = {}
    step_h = plan.scrape_every_ms / H
    ts = plan.shared[1]
    for p in plan.pods:
        for t in range(p.start_ms, p.end_ms, plan.scrape_every_ms):
            if p.node == "node-m":
                layout = plan.shared[0].layout_at(t)
                gi, profile = next((gi, prof) for u, prof, gi in layout.instances if u in p.devices)
                active = int(profile[0]) / 7 * p.sm_at(gi, t)
            else:
                sharing = [q for q in plan.pods if q.node == "node-t" and q.start_ms <= t < q.end_ms]
                phys = round(min(1.0, sum(q.sm_at(0, t) for q in sharing)), 6)
                active = len(p.devices) / ts.replicas * phys
            tenant = p.namespace.removesuffix("-ns")
            out[tenant] = out.get(tenant, 0.0) + active * step_h
    return out


def service_plan() -> ClusterPlan:
    """A vGPU host and a shared model endpoint, 3 hours.

    vgpu-host-1 has one A100 in vGPU mode (weights A100-20C 0.5, A100-4C 0.1). VM vm-1
    (A100-20C) belongs to alpha all along; vm-2 (A100-4C) belongs to beta, is re-assigned to
    gamma at 90 min and stops at 150 min. The endpoint chat-llm is one pod of ml-platform on
    2 exclusive GPUs for 3 h; alpha, beta and gamma call it with different token mixes; the
    rate card weighs output tokens 3x input tokens.
    """
    from gpuledger.demo.cluster import VmPlan

    end = T0 + 3 * H
    a100 = GpuSpec(gpu_uuid("service", "vgpu"), "vgpu-host-1", 0, "NVIDIA A100-SXM4-40GB", "A100-40GB")
    node_e = [GpuSpec(gpu_uuid("service", "e", i), "node-e", i) for i in range(2)]
    vms = [
        VmPlan("vgpu-host-1", "vm-1", det_uuid("vm", 1), "GPU-" + det_uuid("vgpu", 1), a100, "A100-20C", T0, end,
               ((T0, "alpha"),), 0.6),
        VmPlan("vgpu-host-1", "vm-2", det_uuid("vm", 2), "GPU-" + det_uuid("vgpu", 2), a100, "A100-4C", T0,
               T0 + 150 * M, ((T0, "beta"), (T0 + 90 * M, "gamma")), 0.5),
    ]
    namespaces = [NamespacePlan("platform-ns", det_uuid("ns", "platform"), T0 - 24 * H, ((T0 - 24 * H, "ml-platform"),))]
    serving = PodPlan("platform-ns", "chat-llm-0", det_uuid("pod", "chat"), "node-e", (0, 1), T0, end, 0.5,
                      endpoint="chat-llm")
    requests = []
    mixes = {"alpha": (100, 1000, 100, 0), "beta": (50, 200, 800, 0), "gamma": (30, 500, 500, 10)}
    for tenant, (ok, tin, tout, failed) in mixes.items():
        for i in range(ok + failed):
            t = T0 + (i + 1) * 60_000
            requests.append({
                "observed_at": format_rfc3339(t), "endpoint_id": "chat-llm", "model": "llama-3.1-70b",
                "revision": "rev-7", "request_id": f"{tenant}-{i}", "tenant_id": tenant, "project_id": f"{tenant}-app",
                "arrived_at": format_rfc3339(t - 2_000), "prompt_tokens": tin, "completion_tokens": tout,
                "queue_s": 0.01 * (i % 10), "ttft_s": 0.1 + 0.01 * (i % 20), "e2e_s": 1.0 + 0.1 * (i % 10),
                "outcome": "success" if i < ok else "error"})
    ratecards = [{"version": "2026-10-v1", "valid_from": "2026-10-01T00:00:00Z", "valid_to": None, "currency": "USD",
                  "gpu_hour": {"H100-80GB": {"guaranteed": 2.5, "borrowed": 4.0}},
                  "per_million_tokens": {"input": 0.5, "output": 1.5},
                  "endpoint_share_weights": {"input_tokens": 1, "output_tokens": 3},
                  "overhead": {"amount": 0, "rule": "proportional_to_allocation"}}]
    return ClusterPlan(start_ms=T0, end_ms=end, nodes={"node-e": node_e, "vgpu-host-1": [a100]},
                       namespaces=namespaces, pods=[serving], vms=vms, vgpu_gpus=[a100],
                       vgpu_profile_weights={"A100-20C": 0.5, "A100-4C": 0.1}, requests=requests, ratecards=ratecards)


SERVICE_VGPU_TRUTH = {"alpha": 3 * 0.5, "beta": 1.5 * 0.1, "gamma": 1.0 * 0.1}
# weighted units: alpha 100 x (1000 + 3 x 100), beta 50 x (200 + 3 x 800), gamma 30 x (500 + 3 x 500)
SERVICE_UNITS = {"alpha": 130_000, "beta": 130_000, "gamma": 60_000}
SERVICE_SHARE_HOURS = {t: 6.0 * u / 320_000 for t, u in SERVICE_UNITS.items()}


# -- a month with known money (the ledger) -------------------------------------------------
NOV_1 = parse_rfc3339_ms("2026-11-01T00:00:00Z")
DEC_1 = parse_rfc3339_ms("2026-12-01T00:00:00Z")
# node-b's snapshots at these hours after T0 are late: at close, the one at 300 h stands for its
# hour (one cadence) and 301..304 h is a 3 h gap
GAP_HOURS = (301, 302, 303)


def month_plan() -> ClusterPlan:
    """October and November 2026, 2 nodes x 4 H100, hourly snapshots and scrapes (run with a
    PodResources grace of 2 h and a staleness ceiling of 2 h):

    - alpha (quota 2) holds 3 GPUs on node-a all the time;
    - beta (no quota) holds node-a's 4th GPU 100..400 h;
    - gamma (quota 1) holds 2 GPUs on node-b 200..500 h;
    - node-b's GPU 3 is in maintenance 600..624 h;
    - alpha sends 2 requests (2M input, 1M output tokens), beta 4 (4M, 2M), plus a failure.
    Rates: 2.50 guaranteed (the list rate), 1.50 borrowed, 0.50 / 1.50 per million tokens,
    overhead 3,126.00 a month split by allocation.
    """
    end = DEC_1 + 2 * H
    nodes = {n: [GpuSpec(gpu_uuid("month", n, i), n, i) for i in range(4)] for n in ("node-a", "node-b")}
    namespaces = [NamespacePlan(f"{t}-ns", det_uuid("ns", "month", t), T0 - 24 * H, ((T0 - 24 * H, t),))
                  for t in ("alpha", "beta", "gamma")]
    hour = lambda h: T0 + h * H  # noqa: E731
    pods = [PodPlan("alpha-ns", "train-0", det_uuid("pod", "month", "a"), "node-a", (0, 1, 2), T0, end, 0.7),
            PodPlan("beta-ns", "batch-0", det_uuid("pod", "month", "b"), "node-a", (3,), hour(100), hour(400), 0.4),
            PodPlan("gamma-ns", "train-g", det_uuid("pod", "month", "g"), "node-b", (0, 1), hour(200), hour(500), 0.9)]
    requests = []
    for i, (tenant, prompt, completion, outcome) in enumerate(
            [("alpha", 1_000_000, 500_000, "success")] * 2 + [("beta", 1_000_000, 500_000, "success")] * 4
            + [("beta", 7_000_000, 0, "error")]):
        t = hour(48 + i)
        requests.append({"observed_at": format_rfc3339(t), "endpoint_id": "batch-api", "model": "llama-3.1-8b",
                         "revision": "r1", "request_id": f"month-{i}", "tenant_id": tenant,
                         "project_id": f"{tenant}-app", "arrived_at": format_rfc3339(t - 60_000),
                         "prompt_tokens": prompt, "completion_tokens": completion, "queue_s": 0.1, "ttft_s": 0.5,
                         "e2e_s": 30.0, "outcome": outcome})
    return ClusterPlan(
        start_ms=T0, end_ms=end, nodes=nodes, namespaces=namespaces, pods=pods,
        unavailable=[(nodes["node-b"][3].uuid, hour(600), hour(624), "maintenance")],
        snapshot_every_ms=H, scrape_every_ms=H, bookmark_every_ms=H, requests=requests,
        quotas=[{"tenant_id": "alpha", "gpu_class": "H100-80GB", "guaranteed_gpus": 2,
                 "valid_from": "2026-10-01T00:00:00Z", "valid_to": None},
                {"tenant_id": "gamma", "gpu_class": "H100-80GB", "guaranteed_gpus": 1,
                 "valid_from": "2026-10-01T00:00:00Z", "valid_to": None}],
        ratecards=[{"version": "2026-10-v1", "valid_from": "2026-10-01T00:00:00Z", "valid_to": None,
                    "currency": "USD", "gpu_hour": {"H100-80GB": {"guaranteed": "2.50", "borrowed": "1.50"}},
                    "per_million_tokens": {"input": "0.50", "output": "1.50"},
                    "overhead": {"amount": "3126.00", "rule": "proportional_to_allocation"}}],
    )


MONTH_CREDITS = [{"credit_id": "cr-2026-10-alpha-sla", "tenant_id": "alpha", "period": "2026-10", "amount": "100.00",
                  "reason": "SLA credit: node-a maintenance overran"}]
# October at close (node-b has no evidence 301..304 h): by hand from the plan.
# alpha: 1488 h x 2.50 + 744 h x 1.50 + 2.50 tokens + 2232.00 overhead - 100.00 credit
# beta: 300 h x 1.50 + 5.00 tokens + 300.00 overhead; gamma: 297 h x 2.50 + 297 h x 1.50 + 594.00 overhead
OCTOBER_TOTALS = {"alpha": "6970.50", "beta": "755.00", "gamma": "1782.00"}
OCTOBER_RECONCILIATION = {
    "physical_gpu_hours": "5952.000000", "allocated_gpu_hours": "3126.000000", "unallocated_gpu_hours": "2790.000000",
    "unavailable_gpu_hours": "24.000000", "difference_gpu_hours": "12.000000",
    "tenant_charges": "9607.50", "central_charges": "7065.00", "subsidies": "1341.00", "credits": "100.00",
    "recoverable_cost": "17913.50",
}
