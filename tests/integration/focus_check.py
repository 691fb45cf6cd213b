"""Run the FinOps Foundation's focus-validator (FOCUS 1.2 rules inside the package, no
download) on an export; returns the rules that failed and those that passed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from xml.etree import ElementTree

from stack_support import REPO

FOCUS_VALIDATOR = Path(os.environ.get("GPULEDGER_FOCUS_VALIDATOR")
                       or REPO / ".cache" / "focus-validator" / "bin" / "focus-validator")
# The validator's one undecidable leaf: InvoiceId-C-004-C (null when the charge has no invoice)
# and InvoiceId-C-005-C (not null when it has one) carry no condition in its 1.2 rules, so one
# of the two always fails; their composite InvoiceId-C-003-C (either) is the rule that counts.
UNDECIDABLE = {"InvoiceId-C-004-C"}
# With commitment discounts declared supported, the commitment columns' rules apply. One leaf is
# encoded against its own text in the validator's 1.2 model: CommitmentDiscountStatus-C-004-C
# ("MUST NOT be null when CommitmentDiscountId is not null") carries the condition
# "CommitmentDiscountId is null", the same condition as C-003-C ("MUST be null"), so every row
# without a commitment fails one of the two; its composites C-002-C and C-000-C fail with it.
# The export's own test checks the rule as written (tests/integration/test_suspense_month.py).
COMMITMENT_CRITERIA = ("COMMITMENT_DISCOUNT_SUPPORTED", "MULTIPLE_PRICING_CATEGORIES_SUPPORTED")
UNDECIDABLE_WITH_COMMITMENTS = UNDECIDABLE | {"CommitmentDiscountStatus-C-004-C", "CommitmentDiscountStatus-C-002-C",
                                              "CommitmentDiscountStatus-C-000-C"}


def validate_focus(export: Path, work: Path, criteria: tuple[str, ...] = ()) -> tuple[set[str], set[str]]:
    assert FOCUS_VALIDATOR.exists(), f"{FOCUS_VALIDATOR} is missing: `make focus-validator` installs it"
    package = subprocess.run([str(FOCUS_VALIDATOR.with_name("python")), "-c",
                              "import focus_validator, os; print(os.path.dirname(focus_validator.__file__))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    codes = work / "focus_validator" / "rules"  # where it reads ISO 4217 codes: its own copy, no download
    codes.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(package) / "rules" / "currency_codes.csv", codes)
    results = work / f"{export.stem}-{len(criteria)}-results.xml"
    run = subprocess.run([str(FOCUS_VALIDATOR), "--data-file", str(export), "--validate-version", "1.2",
                          "--block-download", "--output-type", "unittest", "--output-destination", str(results),
                          *(["--applicability-criteria", ",".join(criteria)] if criteria else [])],
                         cwd=work, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    cases = {c.get("name").split(" :: ")[0]: c for c in ElementTree.parse(results).getroot().iter("testcase")}
    failed = {name for name, c in cases.items() if c.find("failure") is not None or c.find("error") is not None}
    passed = {name for name, c in cases.items() if c.find("failure") is None and c.find("error") is None
              and c.find("skipped") is None}
    return failed, passed
