"""The access model fails closed on a server left at its shipped defaults, and bounds readers.

A server's row filter for one login and table is worked out here the way ClickHouse does
(src/Access/RowPolicyCache.cpp, ``FiltersMixer::getResult``): the conditions of the
permissive policies that apply to the login (directly or through a role it holds) are ORed,
restrictive ones ANDed on top; when no permissive policy applies and
``users_without_row_policies_can_read_rows`` is true (the shipped default), the OR is left
out, and with nothing else the login reads every row. The live check of the same on a
server is ``test_access_sql_on_a_server`` (``make test-clickhouse-server``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from gpuledger.sinks.access import POLICY_TABLES, SHARED_ROLE_FILTERS, TENANT_FACT_TABLES, AccessModel, Policy
from gpuledger.sinks.access_limits import ReaderLimits

M = AccessModel()
EVERY_ROW = "every row"
ROWS = [{"tenant_id": t, "kind": k} for t in ("acme", "globex", "") for k in ("ratecards", "quotas")]


def held_roles(model: AccessModel, roles=(), tenants=()) -> set[str]:
    """Roles a login holds, with the ones they inherit (a tenant role holds the shared role)."""
    return set(roles) | {model.tenant_role(t) for t in tenants} | ({model.tenants_role} if tenants else set())


def server_filter(policies: list[Policy], table: str, held: set[str],
                  users_without_row_policies_can_read_rows: bool = True) -> str | list[str]:
    """The permissive conditions ORed for ``held`` on ``table`` (every policy here is permissive),
    or ``EVERY_ROW`` when the table has none, or none applies and the setting lets such logins read."""
    on_table = [p for p in policies if p.table == table]
    permissions = [p.condition for p in on_table if held & set(p.roles)]
    if not on_table or (not permissions and users_without_row_policies_can_read_rows):
        return EVERY_ROW
    return permissions


def visible(filter_: str | list[str], rows: list[dict]) -> list[dict]:
    if filter_ == EVERY_ROW:
        return rows

    def holds(condition: str, row: dict) -> bool:
        if condition in ("0", "1"):
            return condition == "1"
        column, value = re.fullmatch(r"(\w+) = '([^']*)'", condition).groups()
        return row[column] == value
    return [r for r in rows if any(holds(c, r) for c in filter_)]


@pytest.mark.parametrize("default_setting", [True, False])
def test_the_shared_role_alone_reads_no_fact_on_any_server(default_setting):
    held = held_roles(M, roles=[M.tenants_role])
    for table in TENANT_FACT_TABLES:
        assert visible(server_filter(M.policies(["acme"]), table, held, default_setting), ROWS) == [], table
    for table in ("reference_documents", "reference_history"):
        shared = visible(server_filter(M.policies(["acme"]), table, held, default_setting), ROWS)
        assert shared and {r["kind"] for r in shared} == {"ratecards"}, table


def test_without_its_zero_policies_the_shared_role_would_read_every_tenant_on_a_default_server():
    # What the model guards against: the shared role with no policy of its own on the facts.
    before = [p for p in M.policies(["acme"]) if not (p.roles == (M.tenants_role,) and p.condition == "0")]
    held = held_roles(M, roles=[M.tenants_role])
    assert visible(server_filter(before, "capacity_facts", held), ROWS) == ROWS
    assert visible(server_filter(before, "capacity_facts", held, False), ROWS) == []


@pytest.mark.parametrize("default_setting", [True, False])
def test_tenants_read_their_own_rows_and_others_every_row_on_any_server(default_setting):
    policies = M.policies(["acme", "globex"])
    for table in TENANT_FACT_TABLES:
        acme = visible(server_filter(policies, table, held_roles(M, tenants=["acme"]), default_setting), ROWS)
        assert acme and {r["tenant_id"] for r in acme} == {"acme"}
        both = visible(server_filter(policies, table, held_roles(M, tenants=["acme", "globex"]), default_setting), ROWS)
        assert {r["tenant_id"] for r in both} == {"acme", "globex"}
        for role in (M.analyst, M.finance, M.writer):
            assert visible(server_filter(policies, table, {role}, default_setting), ROWS) == ROWS


def test_every_reader_holds_a_policy_on_every_table_it_may_read():
    # So no reader of the model depends on users_without_row_policies_can_read_rows.
    grants = {(g.role, g.table) for g in M.grants()}
    for role in M.reader_roles:
        readable = {t for r, t in grants if r == role and t in POLICY_TABLES}
        covered = {p.table for p in M.policies() if role in p.roles}
        assert readable and readable <= covered, role
    assert SHARED_ROLE_FILTERS == {**{t: "0" for t in TENANT_FACT_TABLES}, "reference_documents": "kind = 'ratecards'",
                                   "reference_history": "kind = 'ratecards'"}


# -- reader limits ----------------------------------------------------------------------------

def test_the_reader_profile_constrains_time_memory_and_result_size():
    profile = next(s for s in M.base_statements() if s.startswith("CREATE SETTINGS PROFILE"))
    assert profile == ("CREATE SETTINGS PROFILE OR REPLACE `gpuledger_reader` SETTINGS readonly = 2, "
                       "max_execution_time = 60 MIN 1 MAX 60, max_memory_usage = 4294967296 READONLY, "
                       "max_result_rows = 1000000 READONLY TO `gpuledger_tenants`, `gpuledger_analyst`, "
                       "`gpuledger_finance`")


def test_every_reader_login_has_a_quota_of_its_own():
    quota = next(s for s in M.base_statements() if s.startswith("CREATE QUOTA"))
    assert quota == ("CREATE QUOTA OR REPLACE `gpuledger_reader` KEYED BY user_name FOR INTERVAL 3600 second MAX "
                     "queries = 10000, errors = 1000, result_rows = 100000000, read_rows = 100000000000, "
                     "execution_time = 36000 TO `gpuledger_tenants`, `gpuledger_analyst`, `gpuledger_finance`")
    assert "DROP QUOTA IF EXISTS `gpuledger_reader`" in M.drop_base_statements()


def test_limits_are_parameters_and_none_is_unlimited():
    model = AccessModel(limits=ReaderLimits(max_execution_time_s=5, quota_queries=7))
    text = "\n".join(model.base_statements())
    assert "max_execution_time = 5 MIN 1 MAX 5" in text and "queries = 7," in text
    for bad in ({"max_execution_time_s": 0}, {"quota_queries": -1}, {"max_memory_usage_bytes": True},
                {"quota_read_rows": 1.5}, {"max_result_rows": 100}):
        with pytest.raises(ValueError):
            ReaderLimits(**bad)


def _profile_and_quota(xml: str) -> tuple[dict, dict, dict, str]:
    root = ET.fromstring(xml)
    identity = root.find("profiles/identity")
    settings = {e.tag: e.text for e in identity if e.tag != "constraints"}
    constraints = {e.tag: {c.tag: c.text for c in e} for e in identity.find("constraints")} \
        if identity.find("constraints") is not None else {}
    interval = root.find("quotas/identity/interval")
    quota = {e.tag: int(e.text) for e in interval} if interval is not None else {}
    return settings, constraints, quota, root.find("users/default/quota").text


def test_the_embedded_reader_identity_carries_the_same_limits():
    settings, constraints, quota, assigned = _profile_and_quota(M.embedded_users_xml(tenant_ids=["acme"]))
    assert settings == {"readonly": "2", "max_execution_time": "60", "max_memory_usage": str(4 << 30),
                        "max_result_rows": "1000000"}
    assert constraints == {"max_execution_time": {"min": "1", "max": "60"}, "max_memory_usage": {"readonly": None},
                           "max_result_rows": {"readonly": None}}
    assert quota == {"duration": 3600, **M.limits.quota()} and assigned == "identity"
    settings, constraints, quota, _ = _profile_and_quota(M.embedded_users_xml(roles=[M.writer]))
    assert settings == {} and constraints == {} and quota == {}, "the writer has no reader limits"
