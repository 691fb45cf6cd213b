"""The access model's statements: what each role may read, and that nothing else slips in."""

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpuledger.sinks import access
from gpuledger.sinks.access import (ANALYST_TABLES, FINANCE_TABLES, POLICY_TABLES, TENANT_FACT_TABLES,
                                    WRITER_ONLY_TABLES, AccessModel, access_statements, render_sql)
from gpuledger.sinks.health_sql import health_ddl_statements
from gpuledger.sinks.schema_sql import (CAPACITY_COLUMNS, DEMAND_COLUMNS, REQUEST_COLUMNS, UTILIZATION_COLUMNS,
                                       ddl_statements)

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "clickhouse"
M = AccessModel()


def _grants_to(statements: list[str], role: str) -> list[str]:
    return [s for s in statements if s.startswith("GRANT ") and s.endswith(f" TO `{role}`")]


def test_a_tenant_gets_a_role_and_its_own_rows_of_each_fact_table():
    assert M.tenant_statements("acme") == [
        "CREATE ROLE IF NOT EXISTS `gpuledger_tenant_acme`",
        "GRANT `gpuledger_tenants` TO `gpuledger_tenant_acme`",
        *[f"CREATE ROW POLICY OR REPLACE `gpuledger_tenant_acme` ON gpuledger.{t} FOR SELECT "
          "USING tenant_id = 'acme' AS PERMISSIVE TO `gpuledger_tenant_acme`" for t in TENANT_FACT_TABLES]]
    assert TENANT_FACT_TABLES == ("capacity_facts", "utilization_facts", "request_facts", "demand_facts")


def test_tenants_may_only_select_the_facts_and_the_rate_cards():
    statements = access_statements(["acme", "globex"])
    assert _grants_to(statements, "gpuledger_tenants") == [
        f"GRANT SELECT ON gpuledger.{t} TO `gpuledger_tenants`" for t in POLICY_TABLES]
    for tenant in ("acme", "globex"):  # no table privilege of their own: all through gpuledger_tenants
        assert _grants_to(statements, f"gpuledger_tenant_{tenant}") == [
            f"GRANT `gpuledger_tenants` TO `gpuledger_tenant_{tenant}`"]
    shared = [s for s in statements if "`gpuledger_tenants_shared`" in s]
    assert shared == [*[f"CREATE ROW POLICY OR REPLACE `gpuledger_tenants_shared` ON gpuledger.{t} "
                        "FOR SELECT USING 0 AS PERMISSIVE TO `gpuledger_tenants`" for t in TENANT_FACT_TABLES],
                      *[f"CREATE ROW POLICY OR REPLACE `gpuledger_tenants_shared` ON gpuledger.{t} "
                        "FOR SELECT USING kind = 'ratecards' AS PERMISSIVE TO `gpuledger_tenants`"
                        for t in ("reference_documents", "reference_history")]]
    for table in ("ledger_documents", "ledger_prepared", "processor_checkpoints", "inventory_gpus",
                  "inventory_unavailable"):
        assert not any(table in s for s in _grants_to(statements, "gpuledger_tenants"))


def test_readers_are_read_only_and_the_writer_cannot_drop_or_delete():
    statements = access_statements(["acme"])
    for role in ("gpuledger_tenants", "gpuledger_analyst", "gpuledger_finance"):
        assert {s.split(" ON ")[0] for s in _grants_to(statements, role) if " ON " in s} == {"GRANT SELECT"}
    profile = next(s for s in statements if "SETTINGS PROFILE" in s)
    assert "readonly = 2" in profile and "`gpuledger_writer`" not in profile
    quota = next(s for s in statements if s.startswith("CREATE QUOTA"))
    assert "`gpuledger_writer`" not in quota
    assert _grants_to(statements, "gpuledger_writer") == [
        "GRANT SELECT, INSERT, CREATE DATABASE, CREATE TABLE, ALTER ADD COLUMN ON gpuledger.* TO `gpuledger_writer`"]
    # The writer prepares periods but may not close one: its INSERT on the closed ledger is revoked.
    assert "REVOKE INSERT ON gpuledger.ledger_documents FROM `gpuledger_writer`" in statements
    assert "ledger_documents" in FINANCE_TABLES and "ledger_documents" not in ANALYST_TABLES


def test_only_the_approver_writes_the_closed_ledger_and_it_is_not_a_reader():
    statements = access_statements(["acme"])
    approver = _grants_to(statements, "gpuledger_approver")
    assert "GRANT INSERT ON gpuledger.ledger_documents TO `gpuledger_approver`" in approver
    assert {s for s in approver if "INSERT" in s} == {"GRANT INSERT ON gpuledger.ledger_documents TO `gpuledger_approver`"}
    assert {s.split(" ON ")[1].split(" TO ")[0] for s in approver if s.startswith("GRANT SELECT")} == {
        f"gpuledger.{t}" for t in FINANCE_TABLES}
    for role in ("gpuledger_tenants", "gpuledger_analyst", "gpuledger_finance"):
        assert not any("INSERT" in s for s in _grants_to(statements, role))
    profile = next(s for s in statements if "SETTINGS PROFILE" in s)
    assert "`gpuledger_approver`" not in profile  # read-only readers could not write the ledger
    assert M.approver not in M.reader_roles and M.approver in M.base_roles


def test_every_reader_of_a_policied_table_holds_a_policy_on_it():
    # The server (config.d) refuses a policied table to a login no policy of it applies to:
    # analyst, finance and writer carry an explicit all-rows policy on every such table.
    for p in M.policies(["acme"]):
        assert p.table in POLICY_TABLES
    for role in (M.analyst, M.finance, M.writer, M.approver):
        assert {p.table for p in M.policies() if role in p.roles and p.condition == "1"} == set(POLICY_TABLES)
    tenant_tables = {p.table for p in M.policies(["acme"]) if M.tenant_role("acme") in p.roles}
    assert tenant_tables == set(TENANT_FACT_TABLES)


def test_every_table_of_the_schema_is_decided_and_the_fact_tables_carry_tenant_id():
    created = {m.group(1) for s in ddl_statements("gpuledger") + health_ddl_statements("gpuledger")
               if (m := re.search(r"TABLE IF NOT EXISTS gpuledger\.(\w+)", s))}
    assert created == set(FINANCE_TABLES) | set(WRITER_ONLY_TABLES)
    for columns in (CAPACITY_COLUMNS, UTILIZATION_COLUMNS, REQUEST_COLUMNS, DEMAND_COLUMNS):
        assert "tenant_id" in columns


def test_every_statement_can_be_run_again():
    for s in access_statements(["acme", "ml-platform"]) + M.user_statements("u", [M.analyst], "0" * 64):
        if s.startswith("CREATE"):
            assert " IF NOT EXISTS " in s or " OR REPLACE " in s, s
    assert all(s.startswith("DROP ") and " IF EXISTS " in s
               for s in M.drop_tenant_statements("acme") + M.drop_base_statements() + M.drop_user_statements("u"))


@pytest.mark.parametrize("bad", ["acme' OR 1=1 --", "a`b", "", "-acme", "acme-", "a b", "x" * 64, "ünï", "a;b",
                                 "acme\n", None, 7])
def test_a_tenant_id_that_could_escape_its_literal_is_refused(bad):
    with pytest.raises(ValueError):
        access_statements([bad])
    with pytest.raises(ValueError):
        M.embedded_users_xml(tenant_ids=[bad])


def test_tenant_ids_are_label_values():
    assert "USING tenant_id = 'ml-platform' " in M.tenant_statements("ml-platform")[2]
    assert M.tenant_role("team.a_1") == "gpuledger_tenant_team.a_1"
    with pytest.raises(TypeError):
        access_statements("acme")


def test_the_order_is_fixed_and_a_new_tenant_adds_only_its_own_statements():
    assert access_statements(["globex", "acme", "acme"]) == access_statements(["acme", "globex"])
    assert access_statements(["acme", "globex"]) == access_statements(["acme"]) + M.tenant_statements("globex")


def test_offboarding_drops_each_policy_then_the_role():
    assert M.drop_tenant_statements("acme") == [
        *[f"DROP ROW POLICY IF EXISTS `gpuledger_tenant_acme` ON gpuledger.{t}" for t in TENANT_FACT_TABLES],
        "DROP ROLE IF EXISTS `gpuledger_tenant_acme`"]


def test_a_user_gets_a_hashed_password_and_only_roles_of_the_model():
    digest = "ab" * 32
    assert M.user_statements("tenant_acme", [M.tenant_role("acme")], digest) == [
        f"CREATE USER IF NOT EXISTS `tenant_acme` IDENTIFIED WITH sha256_hash BY '{digest}'",
        "GRANT `gpuledger_tenant_acme` TO `tenant_acme`"]
    for user, roles, hexdigest in (("u", [M.analyst], "plain-password"), ("u", [M.analyst], "AB" * 32),
                                   ("u", ["default_admin"], digest), ("u", [], digest), ("u`x", [M.analyst], digest),
                                   ("u", ["gpuledger_tenant_a'b"], digest), ("u\n", [M.analyst], digest)):
        with pytest.raises(ValueError):
            M.user_statements(user, roles, hexdigest)


def test_another_database_and_prefix_rename_everything():
    other = AccessModel("gpltest_1", prefix="gpltest_1")
    text = "\n".join(other.statements(["acme"]) + other.drop_base_statements())
    assert "gpuledger" not in text and "gpltest_1.capacity_facts" in text and "`gpltest_1_tenant_acme`" in text
    for database, prefix in (("gpuledger; DROP", "p"), ("db", "a-b"), ("1db", "p")):
        with pytest.raises(ValueError):
            AccessModel(database, prefix)
    assert M.shadow_database_statements("replay_x") == [
        "GRANT SELECT, INSERT, CREATE DATABASE, CREATE TABLE, ALTER ADD COLUMN, DROP DATABASE ON replay_x.* "
        "TO `gpuledger_writer`"]
    with pytest.raises(ValueError):
        M.shadow_database_statements("gpuledger")


def _identity(xml: str) -> tuple[list[str], dict[str, str], str | None]:
    user = ET.fromstring(xml).find("users/default")
    grants = [q.text for q in user.find("grants")]
    filters = {t.tag: t.find("filter").text for t in user.find("databases/gpuledger")}
    readonly = ET.fromstring(xml).find("profiles/identity/readonly")
    return grants, filters, None if readonly is None else readonly.text


def test_the_embedded_identity_of_a_tenant_has_its_grants_and_row_filters():
    grants, filters, readonly = _identity(M.embedded_users_xml(tenant_ids=["acme"]))
    assert grants == [f"GRANT SELECT ON gpuledger.{t}" for t in POLICY_TABLES]
    assert filters == {**{t: "tenant_id = 'acme'" for t in TENANT_FACT_TABLES},
                       "reference_documents": "kind = 'ratecards'", "reference_history": "kind = 'ratecards'"}
    assert readonly == "2"


def test_the_embedded_identities_mirror_the_sql_policies():
    _, filters, _ = _identity(M.embedded_users_xml(tenant_ids=["acme", "globex"]))
    assert filters["capacity_facts"] == "(tenant_id = 'acme') OR (tenant_id = 'globex')"
    _, filters, _ = _identity(M.embedded_users_xml(roles=[M.tenants_role]))  # no tenant: no fact rows
    assert {t: filters[t] for t in TENANT_FACT_TABLES} == {t: "0" for t in TENANT_FACT_TABLES}
    grants, filters, readonly = _identity(M.embedded_users_xml(roles=[M.finance]))
    assert "GRANT SELECT ON gpuledger.ledger_documents" in grants and set(filters.values()) == {"1"}
    grants, filters, readonly = _identity(M.embedded_users_xml(roles=[M.writer]))
    assert grants == ["GRANT SELECT, INSERT, CREATE DATABASE, CREATE TABLE, ALTER ADD COLUMN ON gpuledger.*",
                      "REVOKE INSERT ON gpuledger.ledger_documents"]
    assert readonly is None and set(filters) == set(POLICY_TABLES)
    with pytest.raises(ValueError):
        M.embedded_users_xml(roles=["gpuledger_admin"])
    with pytest.raises(ValueError):
        M.embedded_users_xml()


def test_the_committed_scripts_are_what_the_model_generates(capsys):
    from gpuledger.demo import access as demo_access
    from gpuledger.demo.plan import TENANTS

    assert demo_access.main([]) == 0
    assert (DEPLOY / "access.sql").read_text() == capsys.readouterr().out
    assert demo_access.main(["--stack-logins"]) == 0
    assert (DEPLOY / "logins.sh").read_text() == capsys.readouterr().out
    assert not (DEPLOY / "demo-users.sql").exists(), "logins with known passwords are no longer shipped"
    text = (DEPLOY / "access.sql").read_text()
    assert all(f"USING tenant_id = '{t}' " in text for t in TENANTS)
    assert render_sql(["SELECT 1", "SELECT 2"], "a\nb") == "-- a\n-- b\nSELECT 1;\nSELECT 2;\n"


def test_the_access_script_names_its_tenants(capsys):
    """Outside the demo no tenant is assumed: one named is the only tenant role made; none is refused."""
    assert access.main(["--tenant", "acme"]) == 0
    out = capsys.readouterr().out
    assert "USING tenant_id = 'acme' " in out and "USING tenant_id = 'finance' " not in out
    with pytest.raises(SystemExit) as refused:
        access.main([])
    assert refused.value.code == 2 and "--tenant" in capsys.readouterr().err


def test_the_server_config_refuses_tables_with_policies_to_logins_outside_the_model():
    settings = ET.parse(DEPLOY / "config.d" / "access-control.xml").getroot().find("access_control_improvements")
    assert {s.tag: s.text for s in settings} == {
        "users_without_row_policies_can_read_rows": "false", "throw_on_unmatched_row_policies": "true",
        "select_from_system_db_requires_grant": "true", "select_from_information_schema_requires_grant": "true"}
