"""`stack up --secure` material, without starting a broker: the certificate chain, file
modes, the listener's properties per mechanism, and the client settings they give."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

from gpuledger.bus.security import client_config
from gpuledger.config import Settings
from gpuledger.stack import KafkaBroker, StackError
from gpuledger.stack.secure import CLIENT_USER, SecureListener

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the certificates")


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def scram(tmp_path) -> SecureListener:
    listener = SecureListener(tmp_path / "kafka", "127.0.0.1")
    listener.prepare("SCRAM-SHA-512")
    return listener


def test_the_broker_certificate_is_signed_by_the_ca_for_the_listener_host(scram, tmp_path):
    cert = tmp_path / "broker.crt"
    text = scram.keystore.read_text()
    assert "-----BEGIN PRIVATE KEY-----" in text, "PKCS#8, as a Kafka PEM keystore takes it"
    cert.write_text(text[text.index("-----BEGIN CERTIFICATE-----"):])
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(scram.ca), str(cert)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    shown = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-ext", "subjectAltName"],
                           capture_output=True, text=True, check=True).stdout
    assert "IP Address:127.0.0.1" in shown and "DNS:localhost" in shown


def test_keys_and_passwords_are_private_and_the_ca_key_is_gone(scram):
    scram.write_client_env("127.0.0.1:1")
    assert mode(scram.dir) == 0o700
    for private in (scram.keystore, scram.dir / "secrets.json", scram.client_env_file):
        assert mode(private) == 0o600, private
    assert sorted(p.name for p in scram.dir.iterdir()) == ["broker.pem", "ca.pem", "client.env", "secrets.json"]


def test_every_home_gets_its_own_passwords(scram, tmp_path):
    other = SecureListener(tmp_path / "other", "127.0.0.1")
    other.prepare("SCRAM-SHA-512")
    assert scram.secrets()["client_password"] != other.secrets()["client_password"]
    assert scram.secrets()["client_password"] != scram.secrets()["broker_password"]
    again = scram.secrets()
    scram.prepare("SCRAM-SHA-512")
    assert scram.secrets() == again, "a home made before keeps its own"


def test_scram_users_are_made_at_format_and_only_the_broker_login_is_in_its_properties(scram):
    keys = scram.secrets()
    props = scram.server_properties()
    jaas = props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert "ScramLoginModule" in jaas and keys["client_password"] not in "".join(props.values())
    args = scram.format_args()
    assert args.count("--add-scram") == 2
    assert f"SCRAM-SHA-512=[name={CLIENT_USER},password={keys['client_password']}]" in args
    assert props["sasl.enabled.mechanisms"] == props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert props["ssl.keystore.type"] == props["ssl.truststore.type"] == "PEM"


def test_plain_users_are_in_the_listener_jaas(tmp_path):
    plain = SecureListener(tmp_path / "kafka", "127.0.0.1")
    plain.prepare("PLAIN")
    keys = plain.secrets()
    jaas = plain.server_properties()["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert "PlainLoginModule" in jaas and f'user_{CLIENT_USER}="{keys["client_password"]}"' in jaas
    assert plain.format_args() == []


def test_the_client_settings_give_the_same_client_config(scram, monkeypatch):
    for key, value in scram.client_settings("127.0.0.1:1").items():
        monkeypatch.setenv(key, value)
    s = Settings()
    assert s.kafka_bootstrap == "127.0.0.1:1"
    assert client_config(s) == scram.client_config()


def test_an_unknown_mechanism_is_refused(tmp_path):
    with pytest.raises(StackError, match="unknown SASL mechanism"):
        SecureListener(tmp_path / "kafka", "127.0.0.1").prepare("GSSAPI", StackError)


def test_a_plaintext_home_is_not_silently_reused_as_secure(tmp_path):
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "kafka_2.13-3.9.2.jar").touch()
    KafkaBroker(tmp_path / "home", "127.0.0.1:1", libs)._write_config()
    with pytest.raises(StackError, match="was set up with a PLAINTEXT listener"):
        KafkaBroker(tmp_path / "home", "127.0.0.1:1", libs, sasl_mechanism="PLAIN").up(wait_s=1)


def test_a_secure_home_writes_a_private_server_properties(tmp_path):
    broker = KafkaBroker(tmp_path / "home", "127.0.0.1:1", tmp_path, sasl_mechanism="SCRAM-SHA-256")
    broker._write_config()
    props = (broker.dir / "server.properties").read_text()
    assert mode(broker.dir / "server.properties") == 0o600
    assert "listeners=SASL_SSL://127.0.0.1:1,CONTROLLER://127.0.0.1:" in props
    assert "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT" in props
    assert broker.listener == "SASL_SSL (SCRAM-SHA-256)"
    assert broker.client_config()["security.protocol"] == "SASL_SSL"


def test_tool_output_is_redacted(scram):
    keys = scram.secrets()
    said = scram.redact(f"bad argument [name=gpuledger,password={keys['client_password']}]")
    assert keys["client_password"] not in said and "********" in said
