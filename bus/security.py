"""TLS and SASL for every Kafka client, from the settings.

``client_config(settings)`` gives the librdkafka properties that secure a connection; every
producer, consumer and admin client gpuledger makes (publisher, workers, sink, changelogs,
clock probes, replay, bench, the local stack's readiness probe) merges them into its own
configuration, so one set of ``GPULEDGER_KAFKA_*`` settings secures them all. PLAINTEXT
gives no properties. The result holds the password: pass it to clients, never print it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SASL_MECHANISMS", "SECURITY_PROTOCOLS", "client_config", "security_config"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def security_config(protocol: str, mechanism: str = "", username: str = "", password: str = "",
                    ca_location: Path | None = None, certificate_location: Path | None = None,
                    key_location: Path | None = None, key_password: str = "") -> dict[str, str]:
    """librdkafka properties for one security protocol; TLS keeps librdkafka's default of
    verifying the broker's certificate and host name."""
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"unknown Kafka security protocol {protocol!r} (one of {', '.join(SECURITY_PROTOCOLS)})")
    if protocol == "PLAINTEXT":
        return {}
    conf = {"security.protocol": protocol}
    if protocol.startswith("SASL_"):
        if mechanism not in SASL_MECHANISMS:
            raise ValueError(f"unknown SASL mechanism {mechanism!r} (one of {', '.join(SASL_MECHANISMS)})")
        if not username or not password:
            raise ValueError(f"{protocol} needs a SASL user name and password")
        conf.update({"sasl.mechanisms": mechanism, "sasl.username": username, "sasl.password": password})
    if protocol.endswith("SSL"):
        for key, path in (("ssl.ca.location", ca_location), ("ssl.certificate.location", certificate_location),
                          ("ssl.key.location", key_location)):
            if path is not None:
                conf[key] = str(Path(path).resolve())
        if key_password:
            conf["ssl.key.password"] = key_password
    return conf


def client_config(settings) -> dict[str, str]:
    """The security properties of the settings' Kafka clients (merge into each client's config)."""
    return security_config(
        settings.kafka_security_protocol, settings.kafka_sasl_mechanism, settings.kafka_sasl_username,
        settings.kafka_sasl_password.get_secret_value(), settings.kafka_ssl_ca_location,
        settings.kafka_ssl_certificate_location, settings.kafka_ssl_key_location,
        settings.kafka_ssl_key_password.get_secret_value())
