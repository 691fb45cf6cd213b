"""deploy/clickhouse/logins.sh, run as the ClickHouse image runs it, against a stand-in client.

The stand-in ``clickhouse`` on PATH records its arguments and the SQL it is given, so the
script is checked end to end: which users it creates with which roles, that each password
hash is the SHA-256 of the password in its variable, and that a missing or empty password
stops it before anything reaches the server, whether the entrypoint executes it or sources
it (from a ``set -eo pipefail`` shell, as the image's entrypoint is).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuledger.sinks.access import AccessModel
from gpuledger.sinks.access_logins import stack_logins

SCRIPT = Path(__file__).resolve().parents[3] / "deploy" / "clickhouse" / "logins.sh"
BASH = shutil.which("bash")
CREATE = re.compile(r"CREATE USER IF NOT EXISTS `([\w.-]+)` IDENTIFIED WITH sha256_hash BY '([0-9a-f]{64})';")
GRANT = re.compile(r"GRANT `([\w.-]+)` TO `([\w.-]+)`;")
PASSWORDS = {"CLICKHOUSE_WORKER_PASSWORD": "w-Secret_1", "CLICKHOUSE_GRAFANA_PASSWORD": "g-Secret_2",
             "CLICKHOUSE_FINOPS_PASSWORD": "f-Secret_3", "CLICKHOUSE_APPROVER_PASSWORD": "a-Secret_4"}

pytestmark = pytest.mark.skipif(BASH is None, reason="bash is needed to run the script")


def run_script(tmp_path: Path, env: dict[str, str], sourced: bool) -> tuple[int, str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "clickhouse"
    stub.write_text(f'#!/bin/sh\necho "$*" > {tmp_path}/args\ncat > {tmp_path}/sql\n')
    stub.chmod(0o755)
    command = f"set -eo pipefail; . {SCRIPT}; echo after" if sourced else str(SCRIPT)
    base = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CLICKHOUSE_USER": "admin", "CLICKHOUSE_PASSWORD": "adm"}
    done = subprocess.run([BASH, "-c", command], env={**base, **env}, capture_output=True, text=True, timeout=60)
    sql = (tmp_path / "sql").read_text() if (tmp_path / "sql").exists() else ""
    args = (tmp_path / "args").read_text() if (tmp_path / "args").exists() else ""
    return done.returncode, sql, args + done.stdout + done.stderr


@pytest.mark.parametrize("sourced", [False, True], ids=["executed", "sourced"])
def test_the_script_creates_each_login_with_the_hash_of_its_password(tmp_path, sourced):
    assert os.access(SCRIPT, os.X_OK), "logins.sh is executable (else the entrypoint sources it)"
    code, sql, out = run_script(tmp_path, PASSWORDS, sourced)
    assert code == 0, out
    assert "client --host 127.0.0.1 --user admin --password=adm --multiquery" in out
    created = dict(CREATE.findall(sql))
    grants = {user: role for role, user in GRANT.findall(sql)}
    want = {x.user: (x.role, hashlib.sha256(PASSWORDS[x.password_env].encode()).hexdigest())
            for x in stack_logins(AccessModel())}
    assert {u: (grants[u], created[u]) for u in created} == want
    assert len(sql.strip().splitlines()) == 2 * len(want)
    assert not any(p in sql for p in PASSWORDS.values()), "only hashes reach the server"
    if sourced:
        assert "after" in out, "sourcing the script returns to the entrypoint"


@pytest.mark.parametrize("sourced", [False, True], ids=["executed", "sourced"])
@pytest.mark.parametrize("missing", sorted(PASSWORDS))
def test_a_missing_or_empty_password_stops_it_before_the_server_sees_anything(tmp_path, sourced, missing):
    for env in ({k: v for k, v in PASSWORDS.items() if k != missing}, {**PASSWORDS, missing: ""}):
        code, sql, out = run_script(tmp_path, env, sourced)
        assert code != 0 and missing in out, out
        assert sql == "", "nothing is sent when a password is missing"
        assert "after" not in out, "a sourcing entrypoint stops too"
