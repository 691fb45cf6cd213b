"""The pipeline over SASL/SCRAM on TLS, on a broker of its own (`gpuledger stack up --secure`,
its own home and port), and clients that are refused: one without credentials, one with a
wrong password, one that speaks plaintext. The shared test broker is not used."""

from __future__ import annotations

import time
import uuid

import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.bus.security import security_config
from gpuledger.bus.topics import Topics, ensure_topics, read_extents
from gpuledger.demo.cluster import write_capture
from gpuledger.stack import KafkaBroker
from gpuledger.stack.kafka import free_port
from sources.dcgm_exporter import DcgmExporter
from plans import expected_active_hours, expected_allocated_hours, truth_plan
from stack_support import LIBS, Stack

pytestmark = pytest.mark.integration

MECHANISM = "SCRAM-SHA-512"


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A SASL_SSL broker started by the CLI, and a stack whose clients use its settings."""
    base = tmp_path_factory.mktemp("sasl-tls")
    bootstrap = f"127.0.0.1:{free_port()}"
    stack = Stack(base / "home", f"t{uuid.uuid4().hex[:10]}", {"GPULEDGER_KAFKA_BOOTSTRAP": bootstrap})
    broker = KafkaBroker(stack.home, bootstrap, LIBS)
    try:
        up = stack.run("stack", "up", "--secure", "--sasl-mechanism", MECHANISM, timeout=180)
        env_file = broker.secure.client_env_file
        assert f"listener SASL_SSL ({MECHANISM})" in up.stderr and str(env_file) in up.stderr
        assert orjson.loads(stack.run("stack", "status").stdout)["kafka"]["reachable"], "status uses the home's login"
        client_env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
        assert client_env["GPULEDGER_KAFKA_SASL_PASSWORD"] not in up.stderr + up.stdout, "the password is never printed"
        stack.extra_env.update(client_env)
        yield stack, broker, client_env
    finally:
        broker.down()


def refusal(bootstrap: str, conf: dict, timeout_s: float = 3.0) -> tuple[KafkaException, list[KafkaError], list[str]]:
    """Ask for metadata with ``conf``; the exception it raised, the errors and the log lines."""
    errors: list[KafkaError] = []
    logs: list[str] = []

    class Logger:
        def log(self, level, fmt, *args) -> None:
            logs.append(fmt % args if args else fmt)

    admin = AdminClient({"bootstrap.servers": bootstrap, **conf, "error_cb": errors.append, "logger": Logger(),
                         "log_level": 7})
    with pytest.raises(KafkaException) as raised:
        admin.list_topics(timeout=timeout_s)
    admin.poll(0.5)  # serves the error callbacks
    return raised.value, errors, logs


def failed_authentications(broker: KafkaBroker) -> list[str]:
    return [line for line in broker.log_file.read_text(errors="replace").splitlines()
            if "Failed authentication with" in line]


def test_pipeline_end_to_end_over_sasl_ssl(secure):
    stack, _, client_env = secure
    assert stack.env()["GPULEDGER_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    plan = truth_plan()
    capture = write_capture(plan, stack.home.parent / "capture")
    said = stack.run("ingest", str(capture)).stderr + stack.run("process", "--until-caught-up").stderr
    assert client_env["GPULEDGER_KAFKA_SASL_PASSWORD"] not in said
    doc = orjson.loads(stack.run("showback", "--from", "2026-10-01T00:00:00Z", "--to", "2026-10-01T03:00:00Z",
                                 "--format", "json").stdout)
    facts = stack.facts()
    assert facts["capacity_facts"] and facts["utilization_facts"], "facts came through the secured broker"
    allocated = {t["tenant_id"]: t["allocated_gpu_hours"] for t in doc["tenants"]}
    assert allocated.keys() == expected_allocated_hours(plan).keys()
    for tenant, hours in expected_allocated_hours(plan).items():
        assert allocated[tenant] == pytest.approx(hours, abs=1e-6)
    active = {t["tenant_id"]: t["active_gpu_hours"] for t in doc["tenants"]}
    for tenant, hours in expected_active_hours(plan).items():
        assert active[tenant] == pytest.approx(hours, rel=0.005)
    shown = stack.run("config", "validate").stdout
    assert orjson.loads(shown)["kafka_sasl_password"] == "**********"
    assert client_env["GPULEDGER_KAFKA_SASL_PASSWORD"] not in shown


def test_a_live_producer_measures_the_broker_clock_and_publishes_over_sasl_ssl(secure):
    stack, broker, client_env = secure
    topics = Topics(stack.prefix, 4)
    names = [topics.dcgm.name, topics.clock.name]

    def records() -> dict[str, int]:
        extents = read_extents(client_env["GPULEDGER_KAFKA_BOOTSTRAP"], names, client=broker.client_config())
        return {name: sum(high for key, (_, high) in extents.items() if key.rsplit(":", 1)[0] == name)
                for name in names}
    before = records()
    with DcgmExporter() as exporter:
        stack.run("produce", "dcgm", "--cluster", "c1", "--node", "gpu-node-1", "--interval", "0.5",
                  "--dcgm-url", exporter.url, "--for", "3s", timeout=120)
    after = records()
    assert after[topics.dcgm.name] > before[topics.dcgm.name], "scrapes published"
    assert after[topics.clock.name] > before[topics.clock.name], "clock probes answered by the broker"


def test_a_client_without_credentials_is_refused(secure):
    stack, broker, client_env = secure
    bootstrap = client_env["GPULEDGER_KAFKA_BOOTSTRAP"]
    before = len(failed_authentications(broker))
    tls_only = security_config("SSL", ca_location=broker.secure.ca)  # trusts the broker, no SASL login
    exc, _, logs = refusal(bootstrap, tls_only)
    assert exc.args[0].code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
    assert any("Disconnected" in line for line in logs), logs[-5:]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(failed_authentications(broker)) == before:
        time.sleep(0.2)
    refused = failed_authentications(broker)[before:]
    assert refused and "during SASL handshake" in refused[0], refused


def test_a_plaintext_client_is_refused(secure):
    _, broker, client_env = secure
    exc, _, logs = refusal(client_env["GPULEDGER_KAFKA_BOOTSTRAP"], {})
    assert exc.args[0].code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
    assert any("APIVERSION_QUERY" in line or "Disconnected" in line for line in logs), logs[-5:]


def test_a_wrong_password_is_refused(secure):
    _, broker, client_env = secure
    wrong = {**broker.client_config(), "sasl.password": "not-" + client_env["GPULEDGER_KAFKA_SASL_PASSWORD"]}
    _, errors, _ = refusal(client_env["GPULEDGER_KAFKA_BOOTSTRAP"], wrong)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, [e.str() for e in errors]
    assert "invalid credentials" in auth[0].str() and MECHANISM in auth[0].str()


def test_the_cli_with_a_wrong_password_fails(secure):
    stack, _, client_env = secure
    wrong = Stack(stack.home.parent / "wrong", stack.prefix,
                  {**client_env, "GPULEDGER_KAFKA_SASL_PASSWORD": "not-the-password"})
    done = wrong.run("stack", "status", check=False, timeout=60)
    assert done.returncode == 1 and orjson.loads(done.stdout)["kafka"]["reachable"] is False


def test_the_cli_without_a_password_is_a_settings_error(secure):
    stack, _, client_env = secure
    missing = {**client_env, "GPULEDGER_KAFKA_SASL_PASSWORD": ""}
    done = Stack(stack.home, stack.prefix, missing).run("ingest", str(stack.home), check=False, timeout=60)
    assert done.returncode == 2 and "GPULEDGER_KAFKA_SASL_PASSWORD" in done.stderr


def test_plain_over_tls_publishes_and_refuses_a_wrong_password(tmp_path):
    """SASL/PLAIN on TLS: topics created and a record published and read back with the home's
    login; the same user with another password is refused."""
    broker = KafkaBroker(tmp_path / "home", f"127.0.0.1:{free_port()}", LIBS, sasl_mechanism="PLAIN")
    try:
        broker.up(progress=lambda m: None)
        assert broker.listener == "SASL_SSL (PLAIN)"
        client = broker.client_config()
        topics = Topics(f"t{uuid.uuid4().hex[:10]}", 1)
        assert ensure_topics(broker.bootstrap, topics, client=client)
        publisher = KafkaPublisher(broker.bootstrap, client=client)
        publisher.publish(topics.dead_letter.name, b"k", b"over PLAIN on TLS", int(time.time() * 1000))
        publisher.flush()
        del publisher
        assert read_extents(broker.bootstrap, [topics.dead_letter.name], client=client) == {
            f"{topics.dead_letter.name}:0": (0, 1)}
        _, errors, _ = refusal(broker.bootstrap, {**client, "sasl.password": "not-the-password"})
        auth = [e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION]
        assert auth and "Invalid username or password" in auth[0], [e.str() for e in errors]
    finally:
        broker.down()
