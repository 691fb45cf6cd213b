"""Two-step close (pure): a period's document is first *prepared*, then *approved* by a
named person, and only the approved document enters the ledger.

- ``prepare`` marks a built document ``status: prepared`` and records who prepared it, when,
  and the closed documents it was built against (the corrections it books for them).
- ``approve`` closes it: ``status: closed`` and an ``approval`` record (preparer, approver,
  both times); ``seal`` is sha256 over the whole closed document but the seal itself, so the
  approval cannot be edited without breaking it. The content ``hash`` covers the evidence
  only (domain/ledger.py ``UNHASHED``): a replay of the period reproduces it, whoever approved.
- With ``distinct_approver`` the preparer may not approve their own document.

Documents closed before approvals existed have no ``approval`` and no ``seal``; they stay
valid (``verify`` checks the content hash alone).
"""

from __future__ import annotations

import hashlib

import orjson

from gpuledger.domain.ledger import content_hash
from gpuledger.domain.timeutil import format_rfc3339

__all__ = ["ApprovalError", "approve", "prepare", "seal_hash", "stale_against", "verify"]


class ApprovalError(ValueError):
    """The prepared document may not be approved (the message says why and what to do)."""


def _name(who: str, role: str) -> str:
    name = (who or "").strip()
    if not name or any(ord(c) < 32 for c in name) or len(name) > 200:
        raise ApprovalError(f"the {role} must be named (--by NAME: 1-200 printable characters), got {who!r}")
    return name


def prepare(doc: dict, by: str, at_ms: int, closed: list[dict]) -> dict:
    """``doc`` (built, not yet hashed) as a prepared document with its content hash."""
    out = {**doc, "status": "prepared",
           "prepared": {"by": _name(by, "preparer"), "at": format_rfc3339(at_ms),
                        "against": sorted(f"{d['period']} {d['hash']}" for d in closed)}}
    out["hash"] = content_hash(out)
    return out


def stale_against(doc: dict, closed: list[dict]) -> str:
    """Why a prepared document no longer fits the ledger (empty when it does): a period closed
    after it was prepared may hold corrections it would book a second time."""
    now = sorted(f"{d['period']} {d['hash']}" for d in closed)
    if now == doc["prepared"]["against"]:
        return ""
    added = sorted(set(now) - set(doc["prepared"]["against"]))
    return (f"the ledger changed since {doc['period']} was prepared ({', '.join(added) or 'a document went'}): "
            f"prepare it again with `gpuledger close --period {doc['period']}`")


def seal_hash(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != "seal"}
    return "sha256:" + hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def approve(doc: dict, by: str, at_ms: int, distinct_approver: bool, login: str | None = None) -> dict:
    """The closed document: ``doc`` (prepared) approved by ``by`` at ``at_ms``; ``login``: the
    store login that writes it, where the store has several (recorded as ``approved_login``)."""
    if doc.get("status") != "prepared" or "prepared" not in doc:
        raise ApprovalError(f"{doc.get('period')} is {doc.get('status')!r}, not prepared")
    approver = _name(by, "approver")
    problems = verify(doc)
    if problems:
        raise ApprovalError(f"the prepared document of {doc['period']} does not verify ({'; '.join(problems)}): "
                            "prepare it again")
    preparer = doc["prepared"]["by"]
    if distinct_approver and approver == preparer:
        raise ApprovalError(f"{approver} prepared {doc['period']} and may not approve it too: another person "
                            "approves (close_require_distinct_approver)")
    out = {k: v for k, v in doc.items() if k != "prepared"}
    out["status"] = "closed"
    out["approval"] = {"prepared_by": preparer, "prepared_at": doc["prepared"]["at"],
                       "prepared_against": doc["prepared"]["against"],
                       "approved_by": approver, "approved_at": format_rfc3339(at_ms)}
    if login is not None:
        out["approval"]["approved_login"] = login
    out["seal"] = seal_hash(out)
    return out


def verify(doc: dict) -> list[str]:
    """What is wrong with a prepared or closed document's hashes (empty when nothing is)."""
    out = []
    if doc.get("hash") != content_hash(doc):
        out.append(f"content hash {doc.get('hash')} is not {content_hash(doc)}")
    if "approval" in doc and doc.get("seal") != seal_hash(doc):
        out.append(f"seal {doc.get('seal')} is not {seal_hash(doc)}: the closed document was edited")
    return out
