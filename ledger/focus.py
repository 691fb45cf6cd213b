"""FOCUS 1.2 export of a closed period: one row per ledger line (pure).

Every mandatory FOCUS column, the recommended ChargeFrequency, InvoiceId and
ServiceSubcategory, PricingCategory and the CommitmentDiscount columns (a tenant's guaranteed
quota under a committed-quota rate card is a usage commitment: its guaranteed hours are
``Used``, the ``committed`` lines ``Unused``), plus ConsumedQuantity, ConsumedUnit, SkuId, Tags and two custom ``x_``
columns (the ledger hash and the period a correction corrects). Regular lines have a null
ChargeClass; corrections have ``Correction``. Central lines (capacity nobody was charged for,
subsidies, undistributed overhead) bill the central account; suspense lines (hours under
review: domain/suspense.py; unattributed capacity's tagged ``gpuledger/holder``) bill the
central account's suspense account until a decision moves them, as ``suspense_assigned``
usage of the tenant or central that pays. The closed period is the
invoice: InvoiceId names the period, the billing account and the ledger hash. Checked by the
FinOps Foundation's ``focus-validator`` (tests/integration/test_ledger_month.py).
"""

from __future__ import annotations

import csv
import io

import orjson

__all__ = ["FOCUS_COLUMNS", "focus_csv", "focus_rows"]

FOCUS_COLUMNS = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodStart",
    "BillingPeriodEnd", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency", "ChargePeriodStart",
    "ChargePeriodEnd", "ContractedCost", "EffectiveCost", "InvoiceId", "InvoiceIssuerName", "ListCost",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName",
    "ServiceSubcategory", "PricingCategory", "CommitmentDiscountCategory", "CommitmentDiscountId",
    "CommitmentDiscountName", "CommitmentDiscountQuantity", "CommitmentDiscountStatus", "CommitmentDiscountType",
    "CommitmentDiscountUnit",
    "ConsumedQuantity", "ConsumedUnit", "SkuId", "Tags", "x_LedgerHash", "x_CorrectsPeriod",
]
_UNITS = {"gpu_hour": "GPU-Hours", "million_tokens": "1000000 Tokens", "share": "Share", "credit": "Credit",
          "kwh": "kWh"}
_SERVICES = {  # component -> (ServiceCategory, ServiceName, ServiceSubcategory)
    "guaranteed": ("Compute", "GPU capacity (guaranteed)", "Containers"),
    "borrowed": ("Compute", "GPU capacity (borrowed)", "Containers"),
    "variable": ("AI and Machine Learning", "Inference tokens", "Generative AI"),
    "energy": ("Compute", "GPU energy", "Other (Compute)"),
    "service_share": ("AI and Machine Learning", "Shared model endpoint", "Generative AI"),
    "overhead": ("Other", "Platform overhead", "Other (Other)"),
    "credit": ("Other", "Credit", "Other (Other)"),
    "subsidy": ("Compute", "Borrowed-capacity subsidy", "Containers"),
    "committed": ("Compute", "GPU capacity (committed, unused)", "Containers"),
    "commitment_recovery": ("Compute", "Idle capacity recovered by committed quotas", "Containers"),
    "suspense": ("Compute", "GPU capacity (under review)", "Containers"),
    "suspense_assigned": ("Compute", "GPU capacity (assigned after review)", "Containers"),
}
_COMMITMENT = ("CommitmentDiscountCategory", "CommitmentDiscountId", "CommitmentDiscountName",
               "CommitmentDiscountQuantity", "CommitmentDiscountStatus", "CommitmentDiscountType",
               "CommitmentDiscountUnit")
_FREQUENCY = {"credit": "One-Time", "overhead": "Recurring", "committed": "Recurring"}  # the rest is billed as used


def _commitment(ln: dict, committed: set[tuple], provider: str) -> dict:
    """The commitment-discount columns: a tenant's guaranteed quota under a committed-quota
    card is its commitment; its guaranteed hours use it, ``committed`` lines are the unused rest."""
    gpu_class = ln["sku_id"].split("/", 1)[0]
    status = {"guaranteed": "Used", "committed": "Unused"}.get(ln["component"])
    if ln["payer"] != "tenant" or status is None or (ln["tenant_id"], gpu_class, ln["ratecard_version"]) not in committed:
        return dict.fromkeys(_COMMITMENT, "")
    return {"CommitmentDiscountCategory": "Usage",
            "CommitmentDiscountId": f"{provider}/quota/{ln['tenant_id']}/{gpu_class}",
            "CommitmentDiscountName": f"{ln['tenant_id']} guaranteed {gpu_class} quota",
            "CommitmentDiscountQuantity": ln["quantity"], "CommitmentDiscountStatus": status,
            "CommitmentDiscountType": "Guaranteed GPU quota", "CommitmentDiscountUnit": _UNITS["gpu_hour"]}


def focus_rows(doc: dict, provider: str, central_account: str) -> list[dict]:
    projects = {t["tenant_id"]: [p["project_id"] for p in t["projects"]] for t in doc.get("tenant_hierarchy", ())}
    committed = {(c["tenant_id"], c["gpu_class"], c["ratecard_version"]) for c in doc.get("commitments", ())}
    out = []
    for ln in doc["lines"]:
        commitment = _commitment(ln, committed, provider)
        tenant = ln["tenant_id"] if ln["payer"] == "tenant" else None
        account = tenant or (f"{central_account}-suspense" if ln["payer"] == "suspense" else central_account)
        account_name = (f"tenant {tenant}" if tenant else "suspense: under review, billed to no tenant yet"
                        if ln["payer"] == "suspense" else "central platform budget")
        category = "Credit" if ln["component"] == "credit" else "Usage"
        service = _SERVICES.get(ln["component"], ("Compute", f"GPU capacity ({ln['component'].replace('_', ' ')})",
                                                  "Containers"))
        consumed = category == "Usage" and ln["unit"] in ("gpu_hour", "million_tokens")
        tags = {"gpuledger/component": ln["component"], "gpuledger/payer": ln["payer"],
                "gpuledger/ratecard": ln["ratecard_version"] or ""}
        if ln["tenant_id"]:
            tags["gpuledger/tenant"] = ln["tenant_id"]
            tags["gpuledger/projects"] = ",".join(projects.get(ln["tenant_id"], []))
        if ln.get("holder"):  # unattributed capacity: the namespace or VM that held it
            tags["gpuledger/holder"] = ln["holder"]
        out.append({
            "BilledCost": ln["amount"],
            "BillingAccountId": account,
            "BillingAccountName": account_name,
            "BillingCurrency": doc["currency"],
            "BillingPeriodStart": doc["period_start"], "BillingPeriodEnd": doc["period_end"],
            "ChargeCategory": category,
            "ChargeClass": "Correction" if ln["charge_class"] == "Correction" else "",
            "ChargeDescription": ln["description"],
            "ChargeFrequency": _FREQUENCY.get(ln["component"], "Usage-Based"),
            "ChargePeriodStart": ln["charge_period_start"], "ChargePeriodEnd": ln["charge_period_end"],
            "ContractedCost": ln["amount"], "EffectiveCost": ln["amount"],
            "InvoiceId": f"{doc['period']}/{account}/{doc['hash'].removeprefix('sha256:')[:16]}",
            "InvoiceIssuerName": provider, "ListCost": ln["list_amount"],
            "PricingQuantity": ln["quantity"], "PricingUnit": _UNITS.get(ln["unit"], ln["unit"]),
            "ProviderName": provider, "PublisherName": provider,
            "ServiceCategory": service[0], "ServiceName": service[1], "ServiceSubcategory": service[2],
            "PricingCategory": "" if category == "Credit" else (
                "Committed" if commitment["CommitmentDiscountId"] else "Standard"),
            **commitment,
            "ConsumedQuantity": ln["quantity"] if consumed else "",
            "ConsumedUnit": _UNITS[ln["unit"]] if consumed else "",
            "SkuId": ln["sku_id"],
            "Tags": orjson.dumps(tags, option=orjson.OPT_SORT_KEYS).decode(),
            "x_LedgerHash": doc["hash"], "x_CorrectsPeriod": ln["corrects_period"] or "",
        })
    return out


def focus_csv(doc: dict, provider: str, central_account: str) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FOCUS_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(focus_rows(doc, provider, central_account))
    return buf.getvalue()
