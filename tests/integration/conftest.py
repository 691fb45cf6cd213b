"""Integration fixtures: the real broker and engine (see tests/stack_support.py), and a real
Kubernetes API server (see tests/sources/real_apiserver.py)."""

import pytest
from sources.real_apiserver import KubeCluster
from stack_support import (BOOTSTRAP, GPULEDGER, LIBS, REPO, Stack, broker, stack, stop,  # noqa: F401
                           undisturbed_facts, wait_for)


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    """etcd and kube-apiserver with RBAC, one pair per test module."""
    with KubeCluster(tmp_path_factory.mktemp("kube")) as cluster:
        yield cluster
