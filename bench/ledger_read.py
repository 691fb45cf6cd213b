"""What closing a month's ledger holds at fleet scale: ``python -m gpuledger.bench.ledger_read
--gpus 1024 --hours 24``.

The facts a fleet's workers write are generated inside the engine (``INSERT ... SELECT`` over
``numbers()``, no Python per row), so a day or a month of a large fleet takes seconds to set up:
8 GPUs a node, one-minute capacity facts (one in ten GPUs free, the rest held by pods of seven
tenants that change every 37-47 minutes), a DCGM sample every ``--cadence-s`` with power, and a
rate card that prices GPU-hours and energy. Then, in a process of its own (what a shadow
engine or the close runs in), the period's ledger document is built as ``gpuledger close``
builds it; reported: its time, the process's peak resident size, the held intervals it read
and the document's hash (equal across changes that must not move a cent).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["generate", "main", "measure"]

T0 = 1_790_812_800_000  # 2026-10-01T00:00:00Z
PERIOD = "2026-10"
CARD = {"version": "bench-v1", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
        "gpu_hour": {"H100-80GB": {"guaranteed": 2.0, "borrowed": 1.0}}, "energy": {"per_kwh": 0.1}}


def _capacity_sql(db: str, gpus: int, minutes: int) -> str:
    free = "g % 10 = 9"
    pod = "concat('p-', toString(g), '-', toString(intDiv(m, 37 + g % 11)))"
    return f"""INSERT INTO {db}.capacity_facts (fact_id, cluster_id, kind, gpu_uuid, device_id, node, gpu_class,
            mode, profile, capacity_fraction, valid_from_ms, valid_to_ms, tenant_id, project_id, cost_center,
            namespace, namespace_uid, pod_name, pod_uid, container, endpoint_id, workload_kind, confidence, reason,
            src_topic, src_partition, src_offset)
        SELECT concat('c-', toString(g), '-', toString(m)), 'fleet', if({free}, 'unallocated', 'allocated'),
               concat('GPU-', toString(g)), concat('GPU-', toString(g)), concat('node-', toString(intDiv(g, 8))),
               'H100-80GB', 'exclusive', '', 1.0, {T0} + m * 60000, {T0} + (m + 1) * 60000,
               if({free}, '', concat('tenant-', toString(g % 7))), '', '', if({free}, '', concat('ns-', toString(g % 7))),
               '', if({free}, '', {pod}), if({free}, '', concat('uid-', {pod})), '', '', 'pod',
               if({free}, 'unattributed', 'high'), if({free}, 'no pod holds it', ''), 'bench', 0, 0
        FROM (SELECT intDiv(number, {minutes}) AS g, number % {minutes} AS m FROM numbers({gpus * minutes}))"""


def _utilization_sql(db: str, gpus: int, samples: int, cadence_ms: int) -> str:
    ratio = "((k * 31 + g) % 100) / 100"
    return f"""INSERT INTO {db}.utilization_facts (fact_id, cluster_id, gpu_uuid, device_id, node, observed_at_ms,
            span_ms, sm_active_ratio, fb_used_bytes, power_w, energy_j, capacity_fact_id, kind, tenant_id,
            project_id, namespace, pod_name, pod_uid, confidence, reason, src_topic, src_partition, src_offset)
        SELECT concat('u-', toString(g), '-', toString(k)), 'fleet', concat('GPU-', toString(g)),
               concat('GPU-', toString(g)), concat('node-', toString(intDiv(g, 8))), {T0} + k * {cadence_ms},
               {cadence_ms}, {ratio}, NULL, 100 + 600 * {ratio}, NULL,
               concat('c-', toString(g), '-', toString(intDiv(k * {cadence_ms}, 60000))),
               'allocated', '', '', '', '', '', 'high', '', 'bench', 0, 0
        FROM (SELECT intDiv(number, {samples}) AS g, number % {samples} AS k FROM numbers({gpus * samples}))"""


def generate(dsn: str, gpus: int, hours: float, cadence_s: float) -> dict:
    import orjson  # noqa: PLC0415

    from gpuledger.sinks.clickhouse import ClickHouseStore  # noqa: PLC0415

    if 60_000 % int(cadence_s * 1000):
        raise SystemExit(f"--cadence-s {cadence_s}: use an interval that divides a minute (10, 15, 20, 30, 60)")
    minutes, cadence_ms = int(hours * 60), int(cadence_s * 1000)
    samples = minutes * 60_000 // cadence_ms
    store = ClickHouseStore(dsn)
    try:
        store.ensure_schema()
        store.query(_capacity_sql(store.db, gpus, minutes))
        store.query(_utilization_sql(store.db, gpus, samples, cadence_ms))
        store.insert("reference_documents", [["fleet", "ratecards", T0, orjson.dumps([CARD]).decode()]],
                     ["cluster_id", "kind", "observed_at_ms", "document"])
        for table in ("capacity_facts", "utilization_facts"):  # merged, as a store is once its writes settle
            store.query(f"OPTIMIZE TABLE {store.db}.{table} FINAL")
    finally:
        store.close()
    return {"capacity_facts": gpus * minutes, "device_samples": gpus * samples}


def measure(dsn: str) -> dict:
    from gpuledger.ledger.close import build_document  # noqa: PLC0415
    from gpuledger.domain.ledger import content_hash  # noqa: PLC0415
    from gpuledger.sinks.clickhouse import ClickHouseStore  # noqa: PLC0415

    store = ClickHouseStore(dsn)
    try:
        started = time.monotonic()
        doc, _ = build_document(store, [], None, PERIOD, progress=lambda m: print(m, file=sys.stderr, flush=True))
        seconds = time.monotonic() - started
    finally:
        store.close()
    return {"build_document_s": round(seconds, 1), "peak_rss_mib": round(resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024, 1), "hash": content_hash(doc),
            "allocated_gpu_hours": sum(float(v) for v in doc["confidence_gpu_hours"].values()),
            "active_gpu_hours": round(sum(float(t["active_gpu_hours"]) for t in doc["tenants"]), 6)}


def _child(args: argparse.Namespace, step: str) -> dict:
    """``step`` in a process of its own: the embedded engine is opened by one process at a time,
    and the measured process holds nothing but what building the document needs."""
    cmd = [sys.executable, "-m", "gpuledger.bench.ledger_read", "--store", args.store, "--gpus", str(args.gpus),
           "--hours", str(args.hours), "--cadence-s", str(args.cadence_s), step]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpuledger.bench.ledger_read", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=1024)
    p.add_argument("--hours", type=float, default=24)
    p.add_argument("--cadence-s", type=float, default=10)
    p.add_argument("--store", default=".gpuledger/bench-ledger", help="folder of the generated store (reused if there)")
    p.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    dsn = f"chdb://{Path(args.store).resolve() / 'clickhouse'}"
    if args.generate_only:
        started = time.monotonic()
        made = generate(dsn, args.gpus, args.hours, args.cadence_s)
        print(json.dumps({**made, "generate_s": round(time.monotonic() - started, 1)}))
        return 0
    if args.measure_only:
        print(json.dumps(measure(dsn)))
        return 0
    out: dict = {"gpus": args.gpus, "hours": args.hours, "cadence_s": args.cadence_s}
    marker = Path(args.store) / "generated.json"
    if not marker.exists():
        print(f"generating {args.gpus} GPUs x {args.hours} h into {args.store} ...", file=sys.stderr, flush=True)
        Path(args.store).mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({**out, **_child(args, "--generate-only")}))
    out.update(json.loads(marker.read_text()))
    print("building the period's ledger document in a process of its own ...", file=sys.stderr, flush=True)
    out.update(_child(args, "--measure-only"))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
