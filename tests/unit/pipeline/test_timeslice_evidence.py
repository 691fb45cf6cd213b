"""Time-slicing: the exporter repeats a GPU's series once per sharing pod. Identical repeats
carry no per-pod evidence (modeled share); when the pods' series differ, each pod's replicas
get its own value, relative to the share it holds, with confidence medium."""

import re

import orjson
import pytest

from gpuledger.demo.cluster import write_capture
from pipeline import run_capture
from plans import M, T0, sharing_plan

OWN = {"ts-a": 0.3, "ts-b": 0.05}  # measured SM-active of each pod's own series


def _give_pods_their_own_series(capture):
    path = capture / "dcgm.jsonl"
    lines = []
    for raw in path.read_bytes().splitlines():
        line = orjson.loads(raw)
        if line["node"] == "node-t" and 'pod="ts-a"' in line["exposition"] and 'pod="ts-b"' in line["exposition"]:
            out = []
            for s in line["exposition"].splitlines():
                pod = re.search(r'pod="(ts-[ab])"', s)
                if s.startswith("DCGM_FI_PROF_SM_ACTIVE{") and pod:
                    s = s.rsplit(" ", 1)[0] + f" {OWN[pod.group(1)]}"
                out.append(s)
            line["exposition"] = "\n".join(out) + "\n"
        lines.append(orjson.dumps(line))
    path.write_bytes(b"\n".join(lines) + b"\n")


@pytest.fixture(scope="module")
def utilization(tmp_path_factory):
    cap = write_capture(sharing_plan(), tmp_path_factory.mktemp("cap"))
    _give_pods_their_own_series(cap)
    mp, _ = run_capture(cap)
    return [u for u in mp.store.utilization.values() if u.device_id.count("::")]


def test_per_pod_series_give_medium_confidence_relative_to_the_share_held(utilization):
    at = {u.device_id.rsplit("::", 1)[1]: u for u in utilization if u.observed_at_ms == T0 + 45 * M}
    assert (at["0"].confidence, at["1"].confidence, at["2"].confidence) == ("medium", "medium", "medium")
    assert at["0"].sm_active_ratio == pytest.approx(min(1.0, 0.3 * 4 / 2))  # ts-a holds 2 of 4 replicas
    assert at["2"].sm_active_ratio == pytest.approx(0.05 * 4 / 1)  # ts-b holds 1 of 4
    assert at["3"].confidence == "unattributed"


def test_identical_repeats_stay_modeled(utilization):
    alone = [u for u in utilization if u.observed_at_ms == T0 + 10 * M and u.tenant_id == "alpha"]
    assert {u.confidence for u in alone} == {"modeled"}
