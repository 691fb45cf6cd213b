"""Cost per outcome against hand-computed truth: per successful request and per million
output tokens, per tenant, endpoint and model; half up to 1e-6 of the currency."""

from decimal import Decimal

from gpuledger.domain.showback import cost_per_outcome


def _work(tenant, endpoint, model, ok, out_tokens, requests=None):
    return {"tenant_id": tenant, "endpoint_id": endpoint, "model": model, "requests": requests or ok,
            "successful_requests": ok, "input_tokens": 0, "output_tokens": out_tokens}


WORK = [_work("acme", "chat", "llama", 300, 2_000_000, requests=310), _work("acme", "chat", "qwen", 100, 500_000),
        _work("blue", "chat", "llama", 200, 1_500_000), _work("blue", "code", "qwen", 3, 7),
        _work("coral", "chat", "llama", 0, 0, requests=5)]
TOTALS = {"acme": Decimal("1234.56"), "blue": Decimal("10.00"), "delta": Decimal("99.99")}
ENDPOINTS = {"chat": Decimal("100.00"), "code": Decimal("10.00")}


def test_per_tenant_endpoint_and_model():
    doc = cost_per_outcome(TOTALS, ENDPOINTS, WORK, None)
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    # acme: 1234.56 over 400 successful requests and 2.5 M output tokens
    assert tenants["acme"] == {"tenant_id": "acme", "cost": 1234.56, "successful_requests": 400, "output_tokens": 2_500_000,
                               "per_successful_request": 3.0864, "per_million_output_tokens": 493.824,
                               "completed_jobs": 0, "per_completed_job": None}
    # blue: 10.00 / 203 = 0.04926108..., 10.00 / 1.500007 M = 6.66663555...
    assert (tenants["blue"]["per_successful_request"], tenants["blue"]["per_million_output_tokens"]) == (
        0.049261, 6.666636)
    # coral made requests, none succeeded, and is charged nothing: cost 0, nothing to divide by
    assert tenants["coral"] == {"tenant_id": "coral", "cost": 0.0, "successful_requests": 0, "output_tokens": 0,
                                "per_successful_request": None, "per_million_output_tokens": None,
                                "completed_jobs": 0, "per_completed_job": None}
    # delta is charged and served nothing
    assert tenants["delta"]["cost"] == 99.99 and tenants["delta"]["per_successful_request"] is None
    endpoints = {e["endpoint_id"]: e for e in doc["endpoints"]}
    # chat: 100.00 over 600 successful requests (0.1666666...) and 4 M tokens (25.00 per million)
    assert (endpoints["chat"]["per_successful_request"], endpoints["chat"]["per_million_output_tokens"]) == (
        0.166667, 25.0)
    # code: 10.00 / 3 = 3.333333..., 10.00 x 1e6 / 7 = 1428571.4285714...
    assert (endpoints["code"]["per_successful_request"], endpoints["code"]["per_million_output_tokens"]) == (
        3.333333, 1428571.428571)
    models = {m["model"]: m for m in doc["models"]}
    # chat's 100.00 splits by successful requests: llama 500/600, qwen 100/600; code's 10.00 is qwen's
    assert models["llama"]["cost"] == 83.333333 and models["llama"]["per_successful_request"] == 0.166667
    assert models["qwen"]["cost"] == 26.666667  # 16.666666... + 10.00
    assert models["qwen"]["per_successful_request"] == 0.2589  # 26.6666.../103 = 0.25889967..., half up
    assert models["qwen"]["per_million_output_tokens"] == 53.332587  # 26.6666.../0.500007 M = 53.3325866...


def test_without_a_rate_card_costs_are_null_not_zero():
    doc = cost_per_outcome({}, None, WORK, None)
    assert all(t["cost"] is None and t["per_successful_request"] is None for t in doc["tenants"])
    assert all(e["cost"] is None for e in doc["endpoints"]) and all(m["cost"] is None for m in doc["models"])
    assert {t["tenant_id"]: t["successful_requests"] for t in doc["tenants"]} == {"acme": 400, "blue": 203, "coral": 0}


def test_one_tenants_view_holds_its_own_line_only():
    doc = cost_per_outcome(TOTALS, ENDPOINTS, WORK, "blue")
    assert [t["tenant_id"] for t in doc["tenants"]] == ["blue"] and doc["endpoints"] == [] and doc["models"] == []


def test_cost_per_completed_job_per_tenant():
    """acme: 1234.56 over 7 finished jobs = 176.365714...; blue finished none; echo finished 2 and is charged nothing."""
    doc = cost_per_outcome(TOTALS, ENDPOINTS, WORK, None, {"acme": 7, "echo": 2})
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    assert (tenants["acme"]["completed_jobs"], tenants["acme"]["per_completed_job"]) == (7, 176.365714)
    assert (tenants["blue"]["completed_jobs"], tenants["blue"]["per_completed_job"]) == (0, None)
    assert (tenants["echo"]["completed_jobs"], tenants["echo"]["per_completed_job"]) == (2, 0.0)
    assert cost_per_outcome(TOTALS, None, WORK, None, {"acme": 7})["tenants"][0]["per_completed_job"] is None
