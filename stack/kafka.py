"""Start, stop and report a single-node Apache Kafka 3.9 broker in KRaft mode.

One JVM runs broker and controller together (``process.roles=broker,controller``) with
a static quorum (``controller.quorum.voters``). Storage is formatted once with
``kafka.tools.StorageTool format``; the broker runs as ``kafka.Kafka``. All state lives
under ``HOME/kafka``; the jars come from the Maven cache folder filled by ``make``.

The client listener is PLAINTEXT, or SASL_SSL when the home is first started with a SASL
mechanism (``stack up --secure``; stack/secure.py). A home keeps the listener it was made with.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from gpuledger.stack.secure import SecureListener, write_private

__all__ = ["BrokerStatus", "KafkaBroker", "StackError", "free_port", "new_cluster_id"]


class StackError(RuntimeError):
    """The local stack cannot do what was asked; the message names the fix."""


def new_cluster_id(draw: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A random KRaft cluster id: 16 random bytes in unpadded base64url (22 characters).

    ``kafka-storage format -t`` takes an id starting with ``-`` for an option and refuses it
    (1 draw in 64), so such an id is drawn again, as Kafka's own ``Uuid.randomUuid`` does."""
    while True:
        cluster_id = base64.urlsafe_b64encode(draw()).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str
    reachable: bool
    detail: str


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


class KafkaBroker:
    """A local broker owned by one gpuledger home."""

    def __init__(self, home: Path, bootstrap: str, libs: Path, heap_opts: str = "-Xms256m -Xmx768m",
                 sasl_mechanism: str | None = None, client: Mapping[str, str] | None = None) -> None:
        """``sasl_mechanism``: make a new home's listener SASL_SSL with it. ``client``: the
        security properties to reach a broker this home did not make (a home with SASL_SSL
        uses its own)."""
        self.dir = (home / "kafka").resolve()
        self.heap_opts = heap_opts
        self.bootstrap = bootstrap
        self.libs = libs.resolve()
        host, _, port = bootstrap.rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port)
        self.sasl_mechanism, self._client = sasl_mechanism, dict(client or {})
        self.secure = SecureListener(self.dir, self.host)

    @property
    def listener(self) -> str:
        """The client listener's protocol (and SASL mechanism) of this home's broker."""
        return f"SASL_SSL ({self.secure.secrets()['mechanism']})" if self.secure.exists() else "PLAINTEXT"

    def client_config(self) -> dict[str, str]:
        """Security properties of a client of this broker (holds the password: never print it):
        the home's own login, none for a PLAINTEXT broker of this home, else ``client``."""
        if self.secure.exists():
            return self.secure.client_config()
        return {} if self._props.exists() else dict(self._client)

    def _check_listener(self) -> None:
        """A home keeps the listener it was made with: asking for another is an error naming the fix."""
        if not self._props.exists() or self.sasl_mechanism is None:
            return
        made = self.secure.secrets()["mechanism"] if self.secure.exists() else None
        if made != self.sasl_mechanism:
            raise StackError(f"{self.dir} was set up with {f'SASL_SSL ({made})' if made else 'a PLAINTEXT listener'}: "
                             f"stop it (`gpuledger stack down`) and remove {self.dir} to set it up with SASL_SSL "
                             f"({self.sasl_mechanism}), or start it as it is")

    # -- files -----------------------------------------------------------------
    @property
    def _pidfile(self) -> Path:
        return self.dir / "broker.pid"

    @property
    def _props(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.dir / "broker.log"

    def _java(self) -> str:
        java = shutil.which("java")
        if not java:
            raise StackError("java not found on PATH: install a Java 17 runtime (Debian: openjdk-17-jre-headless)")
        return java

    def _classpath(self) -> str:
        jars = list(self.libs.glob("kafka_2.13-3.9.*.jar")) if self.libs.is_dir() else []
        if not jars:
            raise StackError(
                f"Kafka jars missing in {self.libs}: run `make kafka-jars` "
                "(mvn dependency:copy-dependencies from stack/kafka-pom.xml)"
            )
        return f"{self.libs}/*"

    def _write_config(self) -> None:
        if self._props.exists():
            return
        controller_port = free_port(self.host)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, stdout\n"
            "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.kafka=WARN\nlog4j.logger.org.apache.kafka=WARN\nlog4j.logger.state.change.logger=WARN\n"
            "log4j.logger.kafka.server.KafkaServer=INFO\nlog4j.logger.kafka.server.BrokerServer=INFO\n"
            "log4j.logger.org.apache.kafka.common.network.Selector=INFO\n"  # names each refused authentication
        )
        if self.sasl_mechanism is not None:
            self.secure.prepare(self.sasl_mechanism, StackError)
        listener = "SASL_SSL" if self.secure.exists() else "PLAINTEXT"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{controller_port}",
            "listeners": f"{listener}://{self.host}:{self.port},CONTROLLER://{self.host}:{controller_port}",
            "advertised.listeners": f"{listener}://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": listener,
            "listener.security.protocol.map": f"{listener}:{listener},CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
            "num.partitions": "4",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.retention.hours": "-1",
            "message.max.bytes": "8388608",
        }
        if self.secure.exists():
            props.update(self.secure.server_properties())
            self.secure.write_client_env(self.bootstrap)
        write_private(self._props, "".join(f"{k}={v}\n" for k, v in props.items()).encode())

    def _format(self) -> None:
        if (self.dir / "data" / "meta.properties").exists():
            return
        cluster_id = new_cluster_id()
        cmd = [self._java(), "-cp", self._classpath(), "kafka.tools.StorageTool",
               "format", "-t", cluster_id, "-c", str(self._props)]
        if self.secure.exists():
            cmd += self.secure.format_args()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            said = self.secure.redact(done.stderr.strip() or done.stdout.strip())
            raise StackError(f"formatting Kafka storage in {self.dir} failed: {said}")

    # -- lifecycle --------------------------------------------------------------
    def _pid(self) -> int | None:
        try:
            pid = int(self._pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive(pid) else None

    @classmethod
    def started_address(cls, home: Path) -> str | None:
        """The client address of the broker ``home`` started, while its process lives; None
        when it runs none (or was never set up)."""
        kafka = (home / "kafka").resolve()
        try:
            pid = int((kafka / "broker.pid").read_text().strip())
            props = dict(line.split("=", 1) for line in (kafka / "server.properties").read_text().splitlines()
                         if "=" in line)
        except (OSError, ValueError):
            return None
        listener = props.get("advertised.listeners", "")
        return listener.split("://", 1)[1] if _pid_alive(pid) and "://" in listener else None

    def reachable(self, timeout_s: float = 2.0) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout_s):
                pass
            admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.client_config(), "log_level": 0,
                                 "logger": _Quiet()})
            md = admin.list_topics(timeout=timeout_s)
            return bool(md.brokers)
        except Exception:  # noqa: BLE001 — any failure means "not ready yet"
            return False

    def up(self, wait_s: float = 90.0, progress=print) -> BrokerStatus:
        """Start the broker unless it runs already; return once it answers metadata."""
        self._check_listener()
        pid = self._pid()
        if pid is None and self.reachable(1.0):
            progress(f"kafka: using the broker already answering at {self.bootstrap} (not started by this home)")
            return self.status()
        if pid is None:
            java, cp = self._java(), self._classpath()
            self._write_config()
            self._format()
            cmd = [java, *self.heap_opts.split(), "-XX:+UseG1GC", "-Djava.awt.headless=true",
                   f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
                   "-cp", cp, "kafka.Kafka", str(self._props)]
            log = open(self.log_file, "ab")  # noqa: SIM115 — handed to the child
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.dir)
            self._pidfile.write_text(str(proc.pid))
            progress(f"kafka: started broker pid {proc.pid} on {self.bootstrap}, {self.listener} (log {self.log_file})")
            pid = proc.pid
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                tail = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
                raise StackError(f"the Kafka broker exited during start-up; last log lines:\n{tail}")
            if self.reachable(1.0):
                return self.status()
            time.sleep(0.5)
        raise StackError(f"the Kafka broker did not answer on {self.bootstrap} within {wait_s:.0f}s; see {self.log_file}")

    def down(self, wait_s: float = 60.0) -> BrokerStatus:
        pid = self._pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + wait_s
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._pidfile.unlink(missing_ok=True)
        return self.status()

    def status(self) -> BrokerStatus:
        pid = self._pid()
        reachable = self.reachable(1.0)
        detail = "running" if pid and reachable else "starting" if pid else "stopped"
        if not pid and reachable:
            detail = "a broker not started by this home answers"
        return BrokerStatus(pid is not None, pid, self.bootstrap, reachable, detail)


class _Quiet:
    """A logger for librdkafka that keeps readiness probes silent."""

    def log(self, *args, **kwargs) -> None:  # noqa: D401
        return None

    def __getattr__(self, name):
        return self.log
