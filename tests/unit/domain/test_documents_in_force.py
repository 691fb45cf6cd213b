"""The closed document names the reference documents that priced it: the newest one of each
kind that parses, by the canonical hash of its JSON (key order and spacing do not matter)."""

import orjson

from gpuledger.domain.rows import canonical_sha256, documents_in_force

CARD = {"version": "v1", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
        "gpu_hour": {"H100": {"guaranteed": "2.50", "borrowed": "1.75"}}}
QUOTA = {"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 1, "valid_from": "2026-10-01T00:00:00Z"}


def test_the_newest_document_that_parses_is_the_one_named():
    older, newer = [CARD], [{**CARD, "version": "v2"}]
    broken = orjson.dumps([{**CARD, "gpu_hour": {"H100": {"guaranteed": "-1"}}}]).decode()
    rows = {"ratecards": [broken, orjson.dumps(newer).decode(), orjson.dumps(older).decode()],
            "quotas": ['[ {"valid_from": "2026-10-01T00:00:00Z", "guaranteed_gpus": 1, "gpu_class": "H100",'
                       ' "tenant_id": "a"} ]']}
    used = documents_in_force(rows)
    assert used["ratecards"] == canonical_sha256(newer) != canonical_sha256(older)
    assert used["quotas"] == canonical_sha256([QUOTA])  # same content, other key order and spacing
    assert used["credits"] is None and used["endpoints"] is None and used["suspense"] is None
