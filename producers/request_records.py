"""Access-log records of the model-server gateway -> ``requests.jsonl`` capture lines.

The record and its mapping are described in ``gpuledger.producers.requests_events``. Pure:
the time a record was read is an argument.
"""

from __future__ import annotations

import orjson

from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms

__all__ = ["parse_body", "request_line", "text_line", "time_ms"]

_OUTCOME_WORDS = {"success": "success", "succeeded": "success", "ok": "success", "completed": "success",
                  "error": "error", "failed": "error", "failure": "error",
                  "cancelled": "cancelled", "canceled": "cancelled", "aborted": "cancelled", "abort": "cancelled"}


def time_ms(value) -> int | None:
    """An RFC 3339 string or unix seconds -> epoch ms; None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(round(value * 1000))
    try:
        return parse_rfc3339_ms(value)
    except (ValueError, TypeError):
        return None


def _time_text(value):
    """An RFC 3339 string kept verbatim; unix seconds formatted; anything else left for the validator."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_rfc3339(int(round(value * 1000)))
    return value


def _outcome(record: dict):
    given = record.get("outcome")
    if given is None:
        given = record.get("status")
    if given is None:
        return None
    if isinstance(given, str) and given.strip().isdigit():
        given = int(given)
    if isinstance(given, int) and not isinstance(given, bool):
        return "success" if 200 <= given < 300 else "cancelled" if given == 499 else "error"
    return _OUTCOME_WORDS.get(str(given).strip().lower(), given)  # unknown: the validator says so


def request_line(record: dict, read_ms: int) -> dict:
    """Map one access-log record to a ``requests.jsonl`` line (fields it lacks are left out)."""
    line: dict = {}
    arrived_ms, finished_ms = time_ms(record.get("arrived_at")), time_ms(record.get("finished_at"))
    e2e_s = record.get("e2e_s")
    if e2e_s is None and arrived_ms is not None and finished_ms is not None:
        e2e_s = (finished_ms - arrived_ms) / 1000
    if record.get("finished_at") is not None:
        line["observed_at"] = _time_text(record["finished_at"])
    elif arrived_ms is not None and isinstance(e2e_s, (int, float)):
        line["observed_at"] = format_rfc3339(arrived_ms + int(round(e2e_s * 1000)))
    else:
        line["observed_at"] = format_rfc3339(read_ms)
    for name in ("endpoint_id", "model"):
        if record.get(name) is not None:
            line[name] = record[name]
    line["revision"] = record.get("revision") or ""
    request_id = record.get("request_id") or record.get("id")
    if request_id is not None:
        line["request_id"] = request_id
    if record.get("tenant_id") is not None:
        line["tenant_id"] = record["tenant_id"]
    line["project_id"] = record.get("project_id") or ""
    if record.get("arrived_at") is not None:
        line["arrived_at"] = _time_text(record["arrived_at"])
    outcome = _outcome(record)
    usage = record.get("usage") if isinstance(record.get("usage"), dict) else {}
    for name in ("prompt_tokens", "completion_tokens"):
        tokens = usage.get(name, record.get(name))
        if tokens is None and outcome in ("error", "cancelled"):
            tokens = 0  # a request that failed before usage was known was billed nothing
        if tokens is not None:
            line[name] = tokens
    line["queue_s"], line["ttft_s"], line["e2e_s"] = record.get("queue_s"), record.get("ttft_s"), e2e_s
    if outcome is not None:
        line["outcome"] = outcome
    return line


def text_line(raw: bytes, read_ms: int) -> tuple[dict, str | None]:
    """One line of text -> (the capture line, None) or, when it is not a JSON object,
    (``{"observed_at", "raw"}`` for the validator to dead-letter, why)."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return {"observed_at": format_rfc3339(read_ms), "raw": raw.decode("utf-8", "replace")}, f"not JSON: {exc}"
    if not isinstance(record, dict):
        return ({"observed_at": format_rfc3339(read_ms), "raw": raw.decode("utf-8", "replace")},
                f"a JSON {type(record).__name__}, not an object")
    return request_line(record, read_ms), None


def parse_body(body: bytes) -> list[dict]:
    """A POSTed body (one JSON object, a JSON array of them, or JSONL) -> records.
    Raises ValueError saying what is wrong."""
    if not body.strip():
        raise ValueError("empty body: send a JSON object, a JSON array of objects, or JSON lines")
    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError:
        records = []
        for number, raw in enumerate(body.split(b"\n"), start=1):
            if raw.strip():
                try:
                    records.append(orjson.loads(raw))
                except orjson.JSONDecodeError as exc:
                    raise ValueError(f"line {number} is not JSON ({exc}): send a JSON object, a JSON array "
                                     "of objects, or JSON lines") from exc
    else:
        records = found if isinstance(found, list) else [found]
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise ValueError(f"record {i} is a JSON {type(record).__name__}: each record must be an object")
    return records
