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


def validate_focus(export: Path, work: Path) -> tuple[set[str], set[str]]:
    assert FOCUS_VALIDATOR.exists(), f"{FOCUS_VALIDATOR} is missing: `make focus-validator` installs it"
    package = subprocess.run([str(FOCUS_VALIDATOR.with_name("python")), "-c",
                              "import focus_validator, os; print(os.path.dirname(focus_validator.__file__))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    codes = work / "focus_validator" / "rules"  # where it reads ISO 4217 codes: its own copy, no download
    codes.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(package) / "rules" / "currency_codes.csv", codes)
    results = work / f"{export.stem}-results.xml"
    run = subprocess.run([str(FOCUS_VALIDATOR), "--data-file", str(export), "--validate-version", "1.2",
                          "--block-download", "--output-type", "unittest", "--output-destination", str(results)],
                         cwd=work, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    cases = {c.get("name").split(" :: ")[0]: c for c in ElementTree.parse(results).getroot().iter("testcase")}
    failed = {name for name, c in cases.items() if c.find("failure") is not None or c.find("error") is not None}
    passed = {name for name, c in cases.items() if c.find("failure") is None and c.find("error") is None
              and c.find("skipped") is None}
    return failed, passed
