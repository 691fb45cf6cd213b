"""The ClickHouse logins of the compose stack, made from secrets the container is given.

docker-compose.yml takes every password from ``.env`` (``make .env`` writes random ones);
none is in the repository. The ClickHouse image runs ``logins_script`` once, on the first
start of its data volume (``/docker-entrypoint-initdb.d``, after access.sql): every password
variable must be set and non-empty, or nothing is created and the container stops; then, per
login, the SHA-256 of its password and the statements of ``AccessModel.user_statements``.
The script runs whether the entrypoint executes or sources it (its body is a subshell).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.sinks.access import AccessModel

__all__ = ["StackLogin", "logins_script", "stack_logins"]


@dataclass(frozen=True)
class StackLogin:
    user: str
    role: str
    password_env: str


def stack_logins(model: AccessModel) -> list[StackLogin]:
    """The sink and the fleet gauges (writer), Grafana (analyst), FinOps (finance) and who
    approves a month's close (approver: ``close --approve`` logs in as it)."""
    return [StackLogin("gpuledger_worker", model.writer, "CLICKHOUSE_WORKER_PASSWORD"),
            StackLogin("grafana", model.analyst, "CLICKHOUSE_GRAFANA_PASSWORD"),
            StackLogin("finops", model.finance, "CLICKHOUSE_FINOPS_PASSWORD"),
            StackLogin("finops_approver", model.approver, "CLICKHOUSE_APPROVER_PASSWORD")]


def logins_script(model: AccessModel, header: str = "") -> str:
    logins = stack_logins(model)
    for login in logins:  # the same checks as the SQL a server is given
        model.user_statements(login.user, [login.role], "0" * 64)
    required = "\n".join(f'  : "${{{x.password_env}:?run make .env}}"' for x in logins)
    calls = "\n".join(f'    login {x.user} {x.role} "${x.password_env}"' for x in logins)
    comments = "".join(f"# {h}".rstrip() + "\n" for h in header.splitlines())
    return f"""#!/bin/bash
{comments}(
  set -euo pipefail
{required}
  digest() {{ printf '%s' "$1" | sha256sum | cut -d' ' -f1; }}
  login() {{  # user role password
    printf 'CREATE USER IF NOT EXISTS `%s` IDENTIFIED WITH sha256_hash BY '\\''%s'\\'';\\n' "$1" "$(digest "$3")"
    printf 'GRANT `%s` TO `%s`;\\n' "$2" "$1"
  }}
  {{
{calls}
  }} | clickhouse client --host 127.0.0.1 --user "$CLICKHOUSE_USER" --password="$CLICKHOUSE_PASSWORD" --multiquery
)
"""
