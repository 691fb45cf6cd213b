"""The fleet benchmark's check of a run's showback against the generated truth
(bench/fleet.py ``compare_showback``): exact allocated hours, active hours within the stated
tolerance, and every tenant with hours known to the truth; a tenant listed without hours (its
namespace exists, none of its pods held a GPU) is neither missing nor extra. And its options
that cannot go together."""

import pytest

from gpuledger.bench.fleet import compare_showback, parse_args

TRUTH = {"allocated_gpu_hours": {"acme": 10.0, "blue": 4.0}, "active_gpu_hours": {"acme": 5.0, "blue": 1.0},
         "tenants": ["acme", "blue"], "cadence_s": 10.0, "hours": 1.0}


def entry(alloc: float, active: float, coverage: float = 1.0) -> dict:
    return {"allocated_gpu_hours": alloc, "active_gpu_hours": active, "telemetry_coverage": coverage}


def test_equal_hours_pass_and_zero_hour_tenants_are_not_extra():
    got = {"acme": entry(10.0, 5.0), "blue": entry(4.0, 1.0), "coral": entry(0.0, 0.0), "delta": entry(0.0, 0.0)}
    check = compare_showback(got, TRUTH)
    assert check["ok"], check
    assert check["tenants_seen"] == ["acme", "blue"] and check["tenants_extra"] == []


def test_a_tenant_with_hours_the_truth_lacks_fails():
    check = compare_showback({"acme": entry(10.0, 5.0), "blue": entry(4.0, 1.0), "coral": entry(0.5, 0.0)}, TRUTH)
    assert not check["ok"] and check["tenants_extra"] == ["coral"]


def test_a_missing_tenant_or_wrong_hours_fail():
    assert not compare_showback({"acme": entry(10.0, 5.0)}, TRUTH)["ok"]  # blue's 4 h are missing
    assert not compare_showback({"acme": entry(10.0 + 1e-3, 5.0), "blue": entry(4.0, 1.0)}, TRUTH)["ok"]
    allowed = compare_showback({"acme": entry(10.0, 5.0), "blue": entry(4.0, 1.0)}, TRUTH)["active_allowed_rel_diff"]
    assert compare_showback({"acme": entry(10.0, 5.0 * (1 + allowed * 0.9)), "blue": entry(4.0, 1.0)}, TRUTH)["ok"]
    assert not compare_showback({"acme": entry(10.0, 5.0 * (1 + allowed * 1.1)), "blue": entry(4.0, 1.0)}, TRUTH)["ok"]


def test_an_idle_tenant_of_the_truth_must_be_idle():
    truth = {**TRUTH, "active_gpu_hours": {"acme": 5.0, "blue": 0.0}}
    assert compare_showback({"acme": entry(10.0, 5.0), "blue": entry(4.0, 0.0)}, truth)["ok"]
    assert not compare_showback({"acme": entry(10.0, 5.0), "blue": entry(4.0, 0.5)}, truth)["ok"]


def test_an_empty_truth_never_passes():
    assert not compare_showback({}, {**TRUTH, "allocated_gpu_hours": {}, "active_gpu_hours": {}, "tenants": []})["ok"]


def test_active_hours_may_move_by_the_edges_of_the_tenants_pods_and_no_more():
    """A tenant of one short pod: each edge may move its active hours by a scrape interval."""
    truth = {**TRUTH, "active_edge_slack_gpu_hours": {"acme": 0.02, "blue": 0.01}}
    limit = 0.005 * 1.0 + 0.01  # blue: 0.5 % of its 1.0 active hours plus its edges
    assert compare_showback({"acme": entry(10.0, 5.0), "blue": entry(4.0, 1.0 + 0.9 * limit)}, truth)["ok"]
    check = compare_showback({"acme": entry(10.0, 5.0), "blue": entry(4.0, 1.0 - 1.1 * limit)}, truth)
    assert not check["ok"] and check["active_over"] == ["blue"] and check["active_worst_tenant"] == "blue"


def test_the_raw_loop_with_the_parse_is_refused_without_the_raw_loop(capsys):
    """``--raw-parse`` runs after the raw loop: with ``--skip-raw`` it would run nothing, so the
    command is refused with the fix instead."""
    assert parse_args(["--raw-parse"]).raw_parse
    with pytest.raises(SystemExit):
        parse_args(["--raw-parse", "--skip-raw"])
    assert "leave out --skip-raw" in capsys.readouterr().err
