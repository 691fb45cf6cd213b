"""Tenant isolation in ClickHouse as tested values: roles, grants and row policies.

Who reads what:

- a **tenant** role per tenant (``gpuledger_tenant_<id>``) reads only its own rows of the
  four fact tables (a permissive row policy ``tenant_id = '<id>'`` per table) and, through the
  shared ``gpuledger_tenants`` role, the published rate cards (``reference_documents`` and
  ``reference_history`` where ``kind = 'ratecards'``: quotas and credits name other tenants). Nothing else: not the
  inventory, the checkpoints or the closed ledger (every tenant's lines).
- the shared role **alone reads no fact**: it holds a permissive ``USING 0`` policy on each
  fact table, ORed with a tenant role's own. Without it the shared role would have no policy
  of its own on the facts, and a server with the shipped defaults
  (``users_without_row_policies_can_read_rows = true``) gives such a login every row: a login
  granted ``gpuledger_tenants`` by mistake, or a tenant role whose policies were dropped,
  would read every tenant. A restrictive policy cannot do this: restrictive policies are
  ANDed with everything, so ``USING 0 AS RESTRICTIVE`` on the shared role would hide each
  tenant's own rows too.
- **analyst** reads every row of the facts, the reference documents and the inventory;
  **finance** also the closed ledger. Both hold an explicit all-rows policy, so they keep
  reading when the server refuses a table with policies to a user none of them applies to
  (deploy/clickhouse/config.d: ``users_without_row_policies_can_read_rows = false``,
  ``throw_on_unmatched_row_policies = true``).
- **writer** (the worker) creates the schema and writes facts, checkpoints and prepared
  periods; it may not write the closed ledger (a partial revoke of INSERT on
  ``ledger_documents``).
- **approver** (finance's closing authority) reads what finance reads and alone may INSERT
  into ``ledger_documents``: on a server, ``close --approve`` succeeds only for a login holding
  it. It is not a reader role (the reader profile is read-only), so an approver login holds
  this role and no reader role.
- every **reader** role (tenants, analyst, finance) gets the reader settings profile (read
  only, per-query limits it cannot lift) and a quota counted per login (``access_limits``).

A user holding two tenant roles reads both tenants' rows (permissive policies are ORed).
Plain views read with the invoker's policies (SQL SECURITY INVOKER, their default), so a view
over the fact tables needs no policy of its own.

The same model renders two ways: SQL for a ClickHouse server (``access_statements``), and,
for the embedded engine, which runs every query as its one user ``default`` and keeps no
SQL-defined users, the ``users.xml`` that gives that user one identity's grants and row
filters, profile and quota (``AccessModel.embedded_users_xml``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence
from xml.sax.saxutils import escape

from gpuledger.sinks.access_limits import ReaderLimits, profile_sql, profile_xml, quota_sql, quota_xml

__all__ = ["ANALYST_TABLES", "FINANCE_TABLES", "POLICY_TABLES", "SHARED_ROLE_FILTERS", "TENANT_FACT_TABLES",
           "WRITER_ONLY_TABLES", "AccessModel", "Grant", "Policy", "ReaderLimits", "access_statements",
           "check_tenant_id", "render_sql"]

TENANT_FACT_TABLES = ("capacity_facts", "utilization_facts", "request_facts", "demand_facts")
# Shared tables a tenant may read, and which of their rows.
SHARED_TABLE_FILTERS = {"reference_documents": "kind = 'ratecards'", "reference_history": "kind = 'ratecards'"}
POLICY_TABLES = TENANT_FACT_TABLES + tuple(SHARED_TABLE_FILTERS)
# What the shared tenants role alone reads of each table it may select: no fact (a tenant's
# rows come from its own role's policy, ORed in), the rate cards.
SHARED_ROLE_FILTERS = {**{t: "0" for t in TENANT_FACT_TABLES}, **SHARED_TABLE_FILTERS}
# Fleet-wide tables without a tenant column: analysts and finance read them, tenants do not.
ANALYST_TABLES = POLICY_TABLES + ("inventory_gpus", "inventory_unavailable", "capacity_forecasts", "model_facts",
                                  "gpu_health_facts", "gpu_health_incidents")
FINANCE_TABLES = ANALYST_TABLES + ("ledger_documents", "ledger_prepared")
WRITER_ONLY_TABLES = ("processor_checkpoints",)
WRITER_PRIVILEGES = ("SELECT", "INSERT", "CREATE DATABASE", "CREATE TABLE", "ALTER ADD COLUMN")
# The closed ledger: only the approver role writes it (the writer's INSERT is revoked on it).
CLOSED_LEDGER_TABLE = "ledger_documents"

# Kubernetes label values (where tenant ids come from): quoting them is then never needed.
_TENANT_ID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def check_tenant_id(tenant_id: str) -> str:
    """A tenant id usable in a role name and a string literal (a Kubernetes label value)."""
    if not isinstance(tenant_id, str) or not _TENANT_ID.fullmatch(tenant_id):
        raise ValueError(f"{tenant_id!r}: a tenant id is 1-63 letters, digits, '.', '_' or '-', "
                         "starting and ending with a letter or digit")
    return tenant_id


def _ident(name: str) -> str:
    return f"`{name}`"


@dataclass(frozen=True)
class Grant:
    """``privileges`` on ``database.table`` (``table`` None: every table of the database) to ``role``."""
    role: str
    privileges: tuple[str, ...]
    database: str
    table: str | None
    revoke: bool = False  # a partial revoke of a wider grant of the same role

    @property
    def target(self) -> str:
        return f"{self.database}.{self.table or '*'}"


@dataclass(frozen=True)
class Policy:
    """A permissive row policy: ``roles`` read the rows of ``database.table`` where ``condition`` holds."""
    name: str
    database: str
    table: str
    condition: str
    roles: tuple[str, ...]


@dataclass(frozen=True)
class AccessModel:
    """The access model of one database; ``prefix`` namespaces its roles on a shared server;
    ``limits`` bound each reader login."""
    database: str = "gpuledger"
    prefix: str = "gpuledger"
    limits: ReaderLimits = field(default_factory=ReaderLimits)

    def __post_init__(self) -> None:
        for value in (self.database, self.prefix):
            if not _NAME.fullmatch(value):
                raise ValueError(f"{value!r}: a database name or prefix is [A-Za-z_][A-Za-z0-9_]*")

    @property
    def tenants_role(self) -> str:
        return f"{self.prefix}_tenants"

    @property
    def analyst(self) -> str:
        return f"{self.prefix}_analyst"

    @property
    def finance(self) -> str:
        return f"{self.prefix}_finance"

    @property
    def writer(self) -> str:
        return f"{self.prefix}_writer"

    @property
    def approver(self) -> str:
        return f"{self.prefix}_approver"

    @property
    def reader_profile(self) -> str:
        return f"{self.prefix}_reader"

    @property
    def reader_roles(self) -> tuple[str, ...]:
        return self.tenants_role, self.analyst, self.finance

    @property
    def base_roles(self) -> tuple[str, ...]:
        return self.tenants_role, self.analyst, self.finance, self.writer, self.approver

    def tenant_role(self, tenant_id: str) -> str:
        return f"{self.prefix}_tenant_{check_tenant_id(tenant_id)}"

    def is_role(self, name: str) -> bool:
        """A base role, or a tenant role of a well-formed tenant id."""
        tenant = name.removeprefix(f"{self.prefix}_tenant_")
        return name in self.base_roles or (tenant != name and bool(_TENANT_ID.fullmatch(tenant)))

    @staticmethod
    def tenant_condition(tenant_id: str) -> str:
        return f"tenant_id = '{check_tenant_id(tenant_id)}'"

    def grants(self) -> list[Grant]:
        """Table privileges of the base roles (tenant roles hold none of their own)."""
        db = self.database
        out = [Grant(self.tenants_role, ("SELECT",), db, t) for t in POLICY_TABLES]
        out += [Grant(self.analyst, ("SELECT",), db, t) for t in ANALYST_TABLES]
        out += [Grant(self.finance, ("SELECT",), db, t) for t in FINANCE_TABLES]
        out.append(Grant(self.writer, WRITER_PRIVILEGES, db, None))
        out.append(Grant(self.writer, ("INSERT",), db, CLOSED_LEDGER_TABLE, revoke=True))
        out += [Grant(self.approver, ("SELECT",), db, t) for t in FINANCE_TABLES]
        out.append(Grant(self.approver, ("INSERT",), db, CLOSED_LEDGER_TABLE))
        return out

    def policies(self, tenant_ids: Iterable[str] = ()) -> list[Policy]:
        db = self.database
        everyone = (self.analyst, self.finance, self.writer, self.approver)
        out = [Policy(f"{self.prefix}_all_rows", db, t, "1", everyone) for t in POLICY_TABLES]
        out += [Policy(f"{self.prefix}_tenants_shared", db, t, cond, (self.tenants_role,))
                for t, cond in SHARED_ROLE_FILTERS.items()]
        for tenant_id in _unique(tenant_ids):
            role = self.tenant_role(tenant_id)
            out += [Policy(role, db, t, self.tenant_condition(tenant_id), (role,)) for t in TENANT_FACT_TABLES]
        return out

    # SQL for a server -------------------------------------------------------------------------

    def base_statements(self) -> list[str]:
        """Roles, the readers' settings profile and quota, table grants and the shared and
        all-rows policies."""
        out = [f"CREATE ROLE IF NOT EXISTS {_ident(r)}" for r in self.base_roles]
        out.append(profile_sql(self.reader_profile, self.limits, self.reader_roles))
        out.append(quota_sql(self.reader_profile, self.limits, self.reader_roles))
        out += [_grant_sql(g) for g in self.grants()]
        out += [_policy_sql(p) for p in self.policies()]
        return out

    def tenant_statements(self, tenant_id: str) -> list[str]:
        """What onboarding one tenant runs: its role, the shared tenant grants, its row policies."""
        role = self.tenant_role(tenant_id)
        out = [f"CREATE ROLE IF NOT EXISTS {_ident(role)}", f"GRANT {_ident(self.tenants_role)} TO {_ident(role)}"]
        return out + [_policy_sql(p) for p in self.policies([tenant_id]) if p.roles == (role,)]

    def drop_tenant_statements(self, tenant_id: str) -> list[str]:
        """Offboarding: the tenant's policies and role go; its users lose the role with it."""
        role = self.tenant_role(tenant_id)
        out = [f"DROP ROW POLICY IF EXISTS {_ident(role)} ON {self.database}.{t}" for t in TENANT_FACT_TABLES]
        return out + [f"DROP ROLE IF EXISTS {_ident(role)}"]

    def user_statements(self, user: str, roles: Sequence[str], password_sha256_hex: str) -> list[str]:
        """A login holding ``roles`` (all enabled at login: a new user's default roles are ALL)."""
        if not _USER.fullmatch(user):
            raise ValueError(f"{user!r}: a user name is letters, digits, '_', '.' or '-'")
        if not _SHA256_HEX.fullmatch(password_sha256_hex):
            raise ValueError("password_sha256_hex: the lowercase hex SHA-256 of the password (64 characters)")
        for role in roles:
            if not self.is_role(role):
                raise ValueError(f"{role!r} is not a role of this model")
        if not roles:
            raise ValueError(f"{user!r}: a user needs at least one role")
        return [f"CREATE USER IF NOT EXISTS {_ident(user)} IDENTIFIED WITH sha256_hash BY '{password_sha256_hex}'",
                f"GRANT {', '.join(_ident(r) for r in roles)} TO {_ident(user)}"]

    def drop_user_statements(self, user: str) -> list[str]:
        if not _USER.fullmatch(user):
            raise ValueError(f"{user!r}: a user name is letters, digits, '_', '.' or '-'")
        return [f"DROP USER IF EXISTS {_ident(user)}"]

    def drop_base_statements(self) -> list[str]:
        """Everything ``base_statements`` made (tenants first: ``drop_tenant_statements``)."""
        out = [f"DROP ROW POLICY IF EXISTS {_ident(p.name)} ON {p.database}.{p.table}" for p in self.policies()]
        out.append(f"DROP SETTINGS PROFILE IF EXISTS {_ident(self.reader_profile)}")
        out.append(f"DROP QUOTA IF EXISTS {_ident(self.reader_profile)}")
        return out + [f"DROP ROLE IF EXISTS {_ident(r)}" for r in self.base_roles]

    def shadow_database_statements(self, database: str) -> list[str]:
        """Lets the writer build and drop a replay's shadow database (its tables carry no policies)."""
        if not _NAME.fullmatch(database) or database == self.database:
            raise ValueError(f"{database!r}: a shadow database is another plain database name")
        return [f"GRANT {', '.join(WRITER_PRIVILEGES)}, DROP DATABASE ON {database}.* TO {_ident(self.writer)}"]

    def statements(self, tenant_ids: Iterable[str]) -> list[str]:
        out = self.base_statements()
        for tenant_id in _unique(tenant_ids):
            out += self.tenant_statements(tenant_id)
        return out

    # The embedded engine's one identity --------------------------------------------------------

    def embedded_users_xml(self, *, roles: Sequence[str] = (), tenant_ids: Sequence[str] = ()) -> str:
        """users.xml whose ``default`` user holds ``roles`` plus the tenant roles of ``tenant_ids``:
        their table grants, per policy table the OR of their policies' conditions (``0``: no
        rows, as the shared role alone reads of the facts; the server configured as
        deploy/clickhouse/config.d refuses a table no policy applies to with an error
        instead), and for a reader the reader profile and quota."""
        unknown = set(roles) - set(self.base_roles)
        if unknown:
            raise ValueError(f"not base roles of this model (tenant roles come with tenant_ids): {sorted(unknown)}")
        held = set(roles) | {self.tenant_role(t) for t in tenant_ids} | ({self.tenants_role} if tenant_ids else set())
        if not held:
            raise ValueError("an identity holds at least one role")
        grants = [g for g in self.grants() if g.role in held]
        readable = {(g.database, g.table) for g in grants if not g.revoke}
        conditions: dict[str, list[str]] = {}
        for p in self.policies(tenant_ids):
            if held & set(p.roles) and p.condition not in conditions.setdefault(p.table, []):
                conditions[p.table].append(p.condition)
        filters = {t: _or(conditions.get(t, [])) for t in POLICY_TABLES
                   if (self.database, t) in readable or (self.database, None) in readable}
        reader = bool(held & set(self.reader_roles))
        profile = profile_xml(self.limits) if reader else ""
        quota = quota_xml(self.limits) if reader else ""
        queries = "".join(f"<query>{escape(_grant_sql(g, to_role=False))}</query>" for g in grants)
        tables = "".join(f"<{t}><filter>{escape(f)}</filter></{t}>" for t, f in filters.items())
        return ("<clickhouse>\n"
                f"  <profiles><default/><identity>{profile}</identity></profiles>\n"
                f"  <quotas><default/><identity>{quota}</identity></quotas>\n"
                "  <users><default>\n"
                "    <no_password/><networks><ip>::/0</ip></networks><profile>identity</profile><quota>identity</quota>\n"
                f"    <grants>{queries}</grants>\n"
                f"    <databases><{self.database}>{tables}</{self.database}></databases>\n"
                "  </default></users>\n"
                "</clickhouse>\n")


def _grant_sql(g: Grant, to_role: bool = True) -> str:
    sql = f"{'REVOKE' if g.revoke else 'GRANT'} {', '.join(g.privileges)} ON {g.target}"
    if not to_role:
        return sql
    return f"{sql} {'FROM' if g.revoke else 'TO'} {_ident(g.role)}"


def _policy_sql(p: Policy) -> str:
    to = ", ".join(_ident(r) for r in p.roles)
    return (f"CREATE ROW POLICY OR REPLACE {_ident(p.name)} ON {p.database}.{p.table} "
            f"FOR SELECT USING {p.condition} AS PERMISSIVE TO {to}")


def _or(conditions: list[str]) -> str:
    kept = [c for c in conditions if c != "0"]  # x OR 0 is x
    if not kept:
        return "0"
    return kept[0] if len(kept) == 1 else " OR ".join(f"({c})" for c in kept)


def _unique(tenant_ids: Iterable[str]) -> list[str]:
    if isinstance(tenant_ids, str):
        raise TypeError("tenant_ids: an iterable of tenant ids, not one string")
    return sorted({check_tenant_id(t) for t in tenant_ids})


def access_statements(tenant_ids: Iterable[str], database: str = "gpuledger") -> list[str]:
    """Every statement that grants ``tenant_ids`` their own rows (and the base roles), in order;
    idempotent: roles and users IF NOT EXISTS, policies and the profile OR REPLACE."""
    return AccessModel(database).statements(tenant_ids)


def render_sql(statements: Iterable[str], header: str = "") -> str:
    """A script: one statement a line, each ended by ``;`` (``header`` lines become ``--`` comments)."""
    lines = [f"-- {h}".rstrip() for h in header.splitlines()] if header else []
    return "\n".join(lines + [f"{s};" for s in statements]) + "\n"


def main(argv: Sequence[str] | None = None, default_tenants: Sequence[str] = (),
         prog: str = "python -m gpuledger.sinks.access") -> int:
    """Print the access script of the tenants named (``--tenant``, else ``default_tenants``), or
    with --stack-logins the script that creates the compose stack's logins from the passwords
    in its environment."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=main.__doc__)
    parser.add_argument("--tenant", action="append", dest="tenants", help="a tenant id (repeatable)")
    parser.add_argument("--database", default="gpuledger")
    parser.add_argument("--stack-logins", action="store_true")
    args = parser.parse_args(argv)
    model = AccessModel(args.database)
    if args.stack_logins:
        from gpuledger.sinks.access_logins import logins_script

        header = ("Logins of the compose stack (after access.sql): the sink and the fleet gauges,\n"
                  "Grafana and FinOps, each with the password docker-compose.yml passes from .env.\n"
                  "Tenant logins: AccessModel.user_statements, with a secret of their own.\n"
                  f"Generated by: {prog} --stack-logins")
        print(logins_script(model, header), end="")
        return 0
    tenants = args.tenants if args.tenants is not None else list(default_tenants)
    if not tenants:
        parser.error("name the tenants whose roles to create: --tenant ID (repeatable)")
    statements = model.statements(tenants)
    header = ("Roles, grants, row policies, the readers' profile and quota of the gpuledger database: a tenant\n"
              "role reads only its rows, the shared tenants role alone none.\n"
              f"Generated by: {prog} (AccessModel.tenant_statements onboards one tenant)")
    print(render_sql(statements, header), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
