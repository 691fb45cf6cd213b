"""The closed document names the reference documents that priced it: those whose entries in
force priced its window (domain/reference_history.py), by the canonical hash of their JSON
(key order and spacing do not matter), the earliest publication first."""

import orjson

from gpuledger.domain.rows import canonical_sha256, documents_in_force
from gpuledger.domain.timeutil import parse_rfc3339_ms

CARD = {"version": "v1", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
        "gpu_hour": {"H100": {"guaranteed": "2.50", "borrowed": "1.75"}}}
QUOTA = {"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 1, "valid_from": "2026-10-01T00:00:00Z"}
OCT, NOV = parse_rfc3339_ms("2026-10-01T00:00:00Z"), parse_rfc3339_ms("2026-11-01T00:00:00Z")


def test_the_documents_whose_entries_priced_the_window_are_named():
    older, newer = [CARD], [{**CARD, "version": "v2"}]  # both valid from Oct 1: the later published prices
    later = [{**CARD, "version": "v3", "valid_from": "2026-10-15T00:00:00Z"}]
    broken = orjson.dumps([{**CARD, "gpu_hour": {"H100": {"guaranteed": "-1"}}}]).decode()
    rows = {"from_ms": OCT, "to_ms": NOV,
            "ratecards": [broken, orjson.dumps(later).decode(), orjson.dumps(newer).decode(),
                          orjson.dumps(older).decode()],
            "quotas": ['[ {"valid_from": "2026-10-01T00:00:00Z", "guaranteed_gpus": 1, "gpu_class": "H100",'
                       ' "tenant_id": "a"} ]']}
    used = documents_in_force(rows)
    assert used["ratecards"] == [canonical_sha256(newer), canonical_sha256(later)]
    assert used["quotas"] == [canonical_sha256([QUOTA])]  # same content, other key order and spacing
    assert used["credits"] == used["endpoints"] == used["suspense"] == []
    # a window the later card alone prices names it alone
    assert documents_in_force({**rows, "from_ms": parse_rfc3339_ms("2026-10-20T00:00:00Z")})["ratecards"] == [
        canonical_sha256(later)]
