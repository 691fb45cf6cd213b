"""A SASL over TLS listener for the local broker (``gpuledger stack up --secure``).

The client listener becomes ``SASL_SSL``: TLS with a certificate signed by a CA made for
this home, and SASL/PLAIN or SASL/SCRAM authentication. The controller listener stays
PLAINTEXT on the loopback address. Made once, at the first start, under ``HOME/kafka/secure``:

- ``ca.pem``: the CA certificate clients trust (``GPULEDGER_KAFKA_SSL_CA_LOCATION``). The CA's
  key signs the broker certificate and is deleted.
- ``broker.pem`` (0600): the broker's private key (PKCS#8) and certificate, for host names
  ``localhost``, ``127.0.0.1`` and the listener's host; a PEM keystore for the broker.
- ``secrets.json`` (0600): the mechanism and two random passwords: the broker's own user
  (inter-broker) and the client user ``gpuledger``. Nothing is a default: every home has its own.
- ``client.env`` (0600): the ``GPULEDGER_KAFKA_*`` settings of a client of this broker
  (``set -a; . HOME/kafka/secure/client.env; set +a``).

With PLAIN the users and passwords are in the listener's JAAS config (``server.properties``,
0600); with SCRAM their salted credentials are written into the cluster metadata when the
storage is formatted (``--add-scram``), and the JAAS config holds only the broker's own login.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import orjson

from gpuledger.bus.security import SASL_MECHANISMS, security_config

__all__ = ["CLIENT_USER", "SecureListener"]

CLIENT_USER = "gpuledger"
BROKER_USER = "broker"
LISTENER = "SASL_SSL"


def write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner can read (created 0600, never briefly wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)


class SecureListener:
    """The TLS material and SASL users of one home's broker."""

    def __init__(self, kafka_dir: Path, host: str) -> None:
        self.dir, self.host = kafka_dir / "secure", host

    @property
    def ca(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.dir / "broker.pem"

    @property
    def client_env_file(self) -> Path:
        return self.dir / "client.env"

    def exists(self) -> bool:
        return (self.dir / "secrets.json").exists()

    def secrets(self) -> dict:
        return orjson.loads((self.dir / "secrets.json").read_bytes())

    def prepare(self, mechanism: str, stack_error: type[Exception] = RuntimeError) -> None:
        """Make the certificates and users once; a home made before keeps its own."""
        if self.exists():
            return
        if mechanism not in SASL_MECHANISMS:
            raise stack_error(f"unknown SASL mechanism {mechanism!r} (one of {', '.join(SASL_MECHANISMS)})")
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        self._certificates(stack_error)
        keys = {"mechanism": mechanism, "broker_password": secrets.token_urlsafe(24),
                "client_user": CLIENT_USER, "client_password": secrets.token_urlsafe(24)}
        write_private(self.dir / "secrets.json", orjson.dumps(keys))

    def _certificates(self, stack_error: type[Exception]) -> None:
        openssl = shutil.which("openssl")
        if not openssl:
            raise stack_error("openssl not found on PATH: `stack up --secure` makes its certificates with it "
                              "(Debian: apt-get install openssl)")
        try:
            ip = f"IP:{ipaddress.ip_address(self.host)}"
        except ValueError:
            ip = f"DNS:{self.host}"
        names = ",".join(dict.fromkeys(["DNS:localhost", "IP:127.0.0.1", ip]))
        ext = self.dir / "broker.ext"
        ext.write_text(f"subjectAltName={names}\nbasicConstraints=CA:FALSE\n"
                       "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        ca_key, key, csr, crt = (self.dir / n for n in ("ca.key", "broker.key", "broker.csr", "broker.crt"))
        steps = [
            [openssl, "req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(self.ca), "-days", "3650",
             "-subj", "/CN=gpuledger local broker CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            [openssl, "req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={self.host}"],
            [openssl, "x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(ca_key),
             "-set_serial", str(int.from_bytes(secrets.token_bytes(16), "big")), "-days", "825",
             "-extfile", str(ext), "-out", str(crt)],
        ]
        old_umask = os.umask(0o077)  # the private keys are never readable by others, not even briefly
        try:
            for cmd in steps:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
                if done.returncode != 0:
                    raise stack_error(f"making the broker certificate failed ({cmd[1]}): {done.stderr.strip()}")
            write_private(self.keystore, key.read_bytes() + crt.read_bytes())
        finally:
            os.umask(old_umask)
            for leftover in (ca_key, key, csr, crt, ext):
                leftover.unlink(missing_ok=True)
        os.chmod(self.ca, 0o644)

    # -- the broker's side ---------------------------------------------------------------
    def server_properties(self) -> dict[str, str]:
        """Properties of the SASL_SSL listener (merged into server.properties)."""
        keys = self.secrets()
        mechanism = keys["mechanism"]
        login = f'username="{BROKER_USER}" password="{keys["broker_password"]}"'
        if mechanism == "PLAIN":
            jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required {login} '
                    f'user_{BROKER_USER}="{keys["broker_password"]}" '
                    f'user_{keys["client_user"]}="{keys["client_password"]}";')
        else:
            jaas = f"org.apache.kafka.common.security.scram.ScramLoginModule required {login};"
        return {
            "inter.broker.listener.name": LISTENER,
            "sasl.enabled.mechanisms": mechanism,
            "sasl.mechanism.inter.broker.protocol": mechanism,
            f"listener.name.{LISTENER.lower()}.{mechanism.lower()}.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "ssl.client.auth": "none",
        }

    def format_args(self) -> list[str]:
        """``kafka-storage format`` arguments that create the SCRAM users (none for PLAIN)."""
        keys = self.secrets()
        if not keys["mechanism"].startswith("SCRAM-"):
            return []
        return [arg for user, password in ((BROKER_USER, keys["broker_password"]),
                                           (keys["client_user"], keys["client_password"]))
                for arg in ("--add-scram", f"{keys['mechanism']}=[name={user},password={password}]")]

    # -- the clients' side ---------------------------------------------------------------
    def client_settings(self, bootstrap: str) -> dict[str, str]:
        """The ``GPULEDGER_*`` environment of a client of this broker (holds the password)."""
        keys = self.secrets()
        return {"GPULEDGER_KAFKA_BOOTSTRAP": bootstrap, "GPULEDGER_KAFKA_SECURITY_PROTOCOL": LISTENER,
                "GPULEDGER_KAFKA_SASL_MECHANISM": keys["mechanism"],
                "GPULEDGER_KAFKA_SASL_USERNAME": keys["client_user"],
                "GPULEDGER_KAFKA_SASL_PASSWORD": keys["client_password"],
                "GPULEDGER_KAFKA_SSL_CA_LOCATION": str(self.ca)}

    def client_config(self) -> dict[str, str]:
        """librdkafka properties of a client of this broker."""
        keys = self.secrets()
        return security_config(LISTENER, keys["mechanism"], keys["client_user"], keys["client_password"], self.ca)

    def redact(self, text: str) -> str:
        """``text`` with this home's passwords masked (a tool's error may echo its arguments)."""
        if not self.exists():
            return text
        keys = self.secrets()
        for secret in (keys["broker_password"], keys["client_password"]):
            text = text.replace(secret, "********")
        return text

    def write_client_env(self, bootstrap: str) -> Path:
        write_private(self.client_env_file,
                      "".join(f"{k}={v}\n" for k, v in self.client_settings(bootstrap).items()).encode())
        return self.client_env_file
