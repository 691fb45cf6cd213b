"""A real Kubernetes control plane for tests: etcd and kube-apiserver, on loopback ports.

The binaries are the ones ``make kube-bins`` builds from the pinned Go modules in
``stack/etcd`` and ``stack/kubernetes`` into ``.cache/kubernetes`` (``GPULEDGER_KUBE_BIN``
names another directory). ``KubeCluster(workdir).start()`` writes a CA and a serving
certificate, a service-account key and a static token file, starts etcd, then kube-apiserver
with RBAC and waits for ``/readyz``; ``stop()`` ends both (and they die with the test process).

The API server runs as a control plane without controllers: nothing schedules or runs a Pod,
and no controller creates a namespace's ``default`` ServiceAccount (``namespace()`` does it).
Pods are driven through their lifecycle by patching their ``/status``. Pods are not in the
watch cache (``--watch-cache-sizes=pods#0``): a pod watch from a compacted resourceVersion is
answered 410 Expired, and gets no BOOKMARKs. Namespaces are cached, and their watches get
BOOKMARKs (2 s before the watch's timeout, and every minute) carrying the cache's
resourceVersion, which follows etcd's progress notifications (every second here). etcd is
compacted only by ``compact()``.

Authentication: the static token ``ADMIN`` (group system:masters), and ServiceAccount tokens
(``token()``, the TokenRequest API), authorized by RBAC alone.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import urllib3
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("GPULEDGER_KUBE_BIN", REPO / ".cache" / "kubernetes"))
ADMIN = "admin-token-0f3c"
START_TIMEOUT_S = 60


def binaries_missing() -> list[str]:
    return [name for name in ("etcd", "etcdctl", "kube-apiserver", "kubectl") if not (BIN / name).is_file()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child: SIGKILL it when the test process exits, however it exits."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


class KubeCluster:
    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.etcd_port, self.peer_port, self.port = free_port(), free_port(), free_port()
        self.etcd: subprocess.Popen | None = None
        self.apiserver: subprocess.Popen | None = None
        self.starts = 0

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    def start(self) -> KubeCluster:
        missing = binaries_missing()
        if missing:
            raise RuntimeError(f"{', '.join(missing)} not in {BIN}: run `make kube-bins` (it builds them)")
        self._credentials()
        self.etcd = self._spawn("etcd", [
            str(BIN / "etcd"), "--name", "test", "--data-dir", str(self.dir / "etcd"), "--unsafe-no-fsync",
            "--watch-progress-notify-interval", "1s",
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
            "--initial-cluster", f"test=http://127.0.0.1:{self.peer_port}"])
        self._wait(lambda: self._etcd_healthy(), "etcd", self.etcd)
        self.start_apiserver()
        return self

    def start_apiserver(self) -> None:
        d = self.dir
        self.apiserver = self._spawn("kube-apiserver", [
            str(BIN / "kube-apiserver"), "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(self.port),
            "--tls-cert-file", str(d / "serving.crt"), "--tls-private-key-file", str(d / "serving.key"),
            "--client-ca-file", str(self.ca), "--token-auth-file", str(d / "tokens.csv"),
            "--authorization-mode", "RBAC", "--anonymous-auth=false",
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(d / "sa.key"), "--service-account-signing-key-file", str(d / "sa.key"),
            "--service-cluster-ip-range", "10.96.0.0/16", "--endpoint-reconciler-type", "none",
            "--watch-cache-sizes", "pods#0", "--etcd-compaction-interval", "0",
            "--enable-priority-and-fairness=false", "--profiling=false"])
        self._wait(self._ready, "kube-apiserver", self.apiserver)

    def stop_apiserver(self) -> None:
        """SIGTERM, then SIGKILL after 2 s: open watches hold a graceful shutdown back for long."""
        self._end(self.apiserver, grace_s=2)
        self.apiserver = None

    def stop(self) -> None:
        self.stop_apiserver()
        self._end(self.etcd)
        self.etcd = None

    def __enter__(self) -> KubeCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        self.starts += 1
        log = (self.dir / f"{name}-{self.starts}.log").open("w")
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent)

    @staticmethod
    def _end(proc: subprocess.Popen | None, grace_s: float = 15) -> None:
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def _wait(self, ready, what: str, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                logs = sorted(self.dir.glob(f"{what}-*.log"))[-1].read_text()[-4000:]
                self.stop()
                raise RuntimeError(f"{what} did not become ready (exit {proc.poll()}):\n{logs}")
            time.sleep(0.1)

    def _etcd_healthy(self) -> bool:
        try:
            return urllib3.request("GET", self.etcd_url + "/health", timeout=1, retries=False).status == 200
        except urllib3.exceptions.HTTPError:
            return False

    def _ready(self) -> bool:
        try:
            resp = urllib3.PoolManager(ca_certs=str(self.ca)).request(
                "GET", self.url + "/readyz", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=1, retries=False)
            return resp.status == 200
        except urllib3.exceptions.HTTPError:
            return False

    def _credentials(self) -> None:
        d = self.dir
        if (d / "tokens.csv").exists():
            return
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
                 "-keyout", str(d / "ca.key"), "-out", str(self.ca))
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
                 "-keyout", str(d / "serving.key"), "-out", str(d / "serving.csr"))
        (d / "serving.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                       "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
        _openssl("x509", "-req", "-in", str(d / "serving.csr"), "-CA", str(self.ca), "-CAkey", str(d / "ca.key"),
                 "-CAcreateserial", "-days", "2", "-extfile", str(d / "serving.ext"), "-out", str(d / "serving.crt"))
        _openssl("genrsa", "-out", str(d / "sa.key"), "2048")
        (d / "tokens.csv").write_text(f'{ADMIN},admin,uid-admin,"system:masters"\n')

    # -- clients -----------------------------------------------------------------------
    def kubeconfig(self, token: str = ADMIN, name: str = "admin") -> Path:
        path = self.dir / f"kubeconfig-{name}"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.ca)}}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": name}}]}))
        return path

    def api(self, token: str = ADMIN) -> client.ApiClient:
        cfg = client.Configuration()
        cfg.host, cfg.ssl_ca_cert = self.url, str(self.ca)
        cfg.api_key, cfg.api_key_prefix = {"authorization": token}, {"authorization": "Bearer"}
        return client.ApiClient(cfg)

    def kubectl(self, *args: str, token: str = ADMIN, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(self.kubeconfig(token, "kubectl")),
                               "--cache-dir", str(self.dir / "kubectl-cache"), *args],
                              input=stdin, capture_output=True, text=True, timeout=60)

    def token(self, namespace: str, service_account: str) -> str:
        """A token of the ServiceAccount (TokenRequest, as kubelet gets one for a pod)."""
        answer = self.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": {"expirationSeconds": 3600}})
        return answer["status"]["token"]

    # -- faults ------------------------------------------------------------------------
    def compact(self) -> int:
        """Compact etcd at its current revision; returns it. Watches from older
        resourceVersions that etcd must serve (pods) are answered 410 Expired."""
        ctl = [str(BIN / "etcdctl"), "--endpoints", self.etcd_url]
        status = json.loads(subprocess.run([*ctl, "endpoint", "status", "-w", "json"], check=True,
                                           capture_output=True, text=True).stdout)
        revision = int(status[0]["Status"]["header"]["revision"])
        subprocess.run([*ctl, "compact", str(revision), "--physical"], check=True, capture_output=True)
        return revision

    # -- objects -----------------------------------------------------------------------
    def call(self, method: str, path: str, body: dict | None = None, token: str = ADMIN,
             content_type: str = "application/json") -> dict:
        """One API request; the answer's JSON. A non-2xx answer raises ``ApiError``."""
        resp = urllib3.PoolManager(ca_certs=str(self.ca)).request(
            method, self.url + path, body=None if body is None else json.dumps(body),
            headers={"Authorization": f"Bearer {token}", "Content-Type": content_type}, timeout=10, retries=False)
        answer = json.loads(resp.data or b"{}")
        if resp.status >= 300:
            raise ApiError(resp.status, answer)
        return answer

    def namespace(self, name: str, labels: dict | None = None) -> dict:
        """A Namespace, and its ``default`` ServiceAccount (no controller makes it here)."""
        ns = self.call("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels or {}}})
        self.call("POST", f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}})
        return ns

    def label_namespace(self, name: str, labels: dict) -> dict:
        return self.call("PATCH", f"/api/v1/namespaces/{name}", {"metadata": {"labels": labels}},
                         content_type="application/merge-patch+json")

    def pod(self, namespace: str, name: str, node: str = "gpu-node-a1", gpus: int = 1,
            labels: dict | None = None) -> dict:
        """A Pod bound to ``node`` (as the scheduler would) asking for ``gpus`` GPUs; it stays Pending."""
        gpu = {"nvidia.com/gpu": str(gpus)}
        return self.call("POST", f"/api/v1/namespaces/{namespace}/pods", {
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": name, **(labels or {})}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "vllm/vllm-openai:v0.11.0",
                                                       "resources": {"requests": gpu, "limits": gpu}}]}})

    def pod_status(self, pod: dict, **status) -> dict:
        """Merge ``status`` into the Pod's status, as the kubelet or the scheduler would."""
        meta = pod["metadata"]
        return self.call("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                         {"status": status}, content_type="application/merge-patch+json")

    def evict(self, pod: dict) -> None:
        """The Eviction API (what ``kubectl drain`` calls): the Pod gets its DisruptionTarget
        condition and a deletionTimestamp; with no kubelet it stays until ``delete(force=True)``."""
        meta = pod["metadata"]
        self.call("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction", {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]}})

    def get(self, obj: dict) -> dict:
        meta = obj["metadata"]
        return self.call("GET", _path(obj["kind"], meta.get("namespace"), meta["name"]))

    def delete(self, obj: dict) -> dict:
        """Delete at once (grace period 0); the object as it was deleted."""
        meta = obj["metadata"]
        return self.call("DELETE", _path(obj["kind"], meta.get("namespace"), meta["name"]),
                         {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})


class ApiError(Exception):
    def __init__(self, status: int, answer: dict) -> None:
        super().__init__(f"HTTP {status}: {answer.get('message', answer)}")
        self.status, self.answer = status, answer


def _path(kind: str, namespace: str | None, name: str) -> str:
    plural = kind.lower() + "s"
    return f"/api/v1/namespaces/{namespace}/{plural}/{name}" if namespace else f"/api/v1/{plural}/{name}"
