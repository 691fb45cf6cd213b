"""Kafka client security from the settings: the librdkafka properties, the checks on the
settings, and that every Kafka client in the package takes them."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuledger.bus.security import client_config, security_config
from gpuledger.config import Settings
from gpuledger.streams.supervisor import child_env

REPO = Path(__file__).resolve().parents[3]
PASSWORD = "s3cret-Pa55word-for-tests"


@pytest.fixture(autouse=True)
def no_kafka_env(monkeypatch):
    for key in [k for k in os.environ if k.startswith("GPULEDGER_KAFKA_")]:
        monkeypatch.delenv(key)


def settings(**kwargs) -> Settings:
    return Settings(**kwargs)


def test_plaintext_adds_nothing():
    assert client_config(settings()) == {}


def test_sasl_ssl_gives_protocol_mechanism_login_and_ca(tmp_path):
    ca = tmp_path / "ca.pem"
    conf = client_config(settings(kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="SCRAM-SHA-256",
                                  kafka_sasl_username="gpuledger", kafka_sasl_password=PASSWORD,
                                  kafka_ssl_ca_location=ca))
    assert conf == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "gpuledger",
                    "sasl.password": PASSWORD, "ssl.ca.location": str(ca.resolve())}
    assert "ssl.endpoint.identification.algorithm" not in conf, "librdkafka's default verifies the host name"


def test_mutual_tls_gives_certificate_and_key(tmp_path):
    conf = client_config(settings(kafka_security_protocol="SSL", kafka_ssl_certificate_location=tmp_path / "c.pem",
                                  kafka_ssl_key_location=tmp_path / "k.pem", kafka_ssl_key_password="kp"))
    assert conf == {"security.protocol": "SSL", "ssl.certificate.location": str(tmp_path / "c.pem"),
                    "ssl.key.location": str(tmp_path / "k.pem"), "ssl.key.password": "kp"}


def test_sasl_plaintext_has_no_tls_properties():
    conf = client_config(settings(kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_mechanism="PLAIN",
                                  kafka_sasl_username="u", kafka_sasl_password=PASSWORD))
    assert conf["security.protocol"] == "SASL_PLAINTEXT" and not any(k.startswith("ssl.") for k in conf)


@pytest.mark.parametrize("kwargs, reason", [
    ({"kafka_security_protocol": "SASL_SSL"}, "needs GPULEDGER_KAFKA_SASL_USERNAME and GPULEDGER_KAFKA_SASL_PASSWORD"),
    ({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_username": "u"}, "needs GPULEDGER_KAFKA_SASL_USERNAME"),
    ({"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_password": PASSWORD}, "needs GPULEDGER_KAFKA_SASL"),
    ({"kafka_sasl_username": "u", "kafka_sasl_password": PASSWORD}, "does not use them"),
    ({"kafka_security_protocol": "SSL", "kafka_sasl_password": PASSWORD}, "does not use them"),
    ({"kafka_ssl_ca_location": "/ca.pem"}, "kafka_ssl_ca_location set but kafka_security_protocol PLAINTEXT"),
    ({"kafka_security_protocol": "SSL", "kafka_ssl_certificate_location": "/c.pem"}, "needs both"),
    ({"kafka_security_protocol": "TLS"}, "kafka_security_protocol"),
    ({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "GSSAPI", "kafka_sasl_username": "u",
      "kafka_sasl_password": PASSWORD}, "kafka_sasl_mechanism"),
])
def test_inconsistent_settings_are_refused_with_the_reason(kwargs, reason):
    with pytest.raises(ValidationError) as raised:
        settings(**kwargs)
    assert reason in str(raised.value)
    assert PASSWORD not in str(raised.value), "a settings error never shows the password"


def test_settings_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GPULEDGER_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("GPULEDGER_KAFKA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("GPULEDGER_KAFKA_SASL_USERNAME", "gpuledger")
    monkeypatch.setenv("GPULEDGER_KAFKA_SASL_PASSWORD", PASSWORD)
    monkeypatch.setenv("GPULEDGER_KAFKA_SSL_CA_LOCATION", str(tmp_path / "ca.pem"))
    s = Settings()
    assert client_config(s)["sasl.password"] == PASSWORD
    assert PASSWORD not in repr(s) and PASSWORD not in s.model_dump_json()


def test_child_processes_get_the_same_security_settings(monkeypatch, tmp_path):
    s = settings(kafka_security_protocol="SASL_SSL", kafka_sasl_username="gpuledger", kafka_sasl_password=PASSWORD,
                 kafka_ssl_ca_location=tmp_path / "ca.pem")
    env = child_env(s)
    assert env["GPULEDGER_KAFKA_SASL_PASSWORD"] == PASSWORD, "not the masked form"
    for key, value in env.items():
        if key.startswith("GPULEDGER_"):
            monkeypatch.setenv(key, value)
    assert client_config(Settings()) == client_config(s)


def test_security_config_refuses_what_librdkafka_would_misread():
    with pytest.raises(ValueError, match="unknown Kafka security protocol"):
        security_config("sasl-ssl")
    with pytest.raises(ValueError, match="SASL mechanism"):
        security_config("SASL_SSL", "OAUTHBEARER", "u", "p")
    with pytest.raises(ValueError, match="user name and password"):
        security_config("SASL_SSL", "PLAIN", "u", "")


def _client_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in ("Consumer", "Producer", "AdminClient") and node.args:
                yield node


def test_every_kafka_client_of_the_package_merges_the_security_properties():
    """Each confluent-kafka client is built from a dict literal that unpacks the security
    properties (``**client``, ``**client_config(...)``, or a base dict that does)."""
    found = []
    for path in REPO.rglob("*.py"):
        rel = path.relative_to(REPO)
        if rel.parts[0] in ("tests", ".venv", ".cache", "build") or rel.parts[0].startswith("."):
            continue
        for call in _client_calls(ast.parse(path.read_text(), str(path))):
            conf = call.args[0]
            assert isinstance(conf, ast.Dict), f"{rel}:{call.lineno}: build the client config as a dict literal"
            unpacked = [ast.unparse(v) for k, v in zip(conf.keys, conf.values) if k is None]
            assert unpacked, f"{rel}:{call.lineno}: a Kafka client without the security properties"
            found.append(f"{rel}:{call.lineno}")
    assert len(found) >= 12, found
