"""The versions of the source systems the evidence of a period names (pure).

What the sources themselves say, read from their own records: the NVIDIA driver and the GPU
models (dcgm-exporter labels every series with ``DCGM_FI_DRIVER_VERSION`` and ``modelName``),
and each model service's model and revision (request events). What they do not say is listed
as such, never guessed: dcgm-exporter and DCGM do not put their own versions in a scrape, a
Kubernetes watch event carries no cluster version, and vLLM's ``/metrics`` names the Python
runtime but not vLLM's release.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["NOT_IN_EVIDENCE", "exposition_versions", "versions_document"]

_LABELS = {"DCGM_FI_DRIVER_VERSION": "nvidia_driver", "modelName": "gpu_model"}
_LABEL = re.compile(r'(DCGM_FI_DRIVER_VERSION|modelName)="((?:[^"\\]|\\.)*)"')
NOT_IN_EVIDENCE = {
    "dcgm_exporter": "dcgm-exporter does not report its own version in a scrape",
    "dcgm": "DCGM's version is not in dcgm-exporter's output",
    "kubernetes": "watch events of pods and namespaces carry no cluster version",
    "vllm": "vLLM's /metrics names the Python runtime (python_info), not vLLM's release",
}


def exposition_versions(text: str) -> dict[str, set[str]]:
    """The driver versions and GPU models one dcgm-exporter scrape names."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        for name, value in _LABEL.findall(line[line.index("{"):]):
            if value:
                out.setdefault(_LABELS[name], set()).add(value)
    return out


def versions_document(found: dict[str, set[str]], model_revisions: Iterable[tuple[str, str]],
                      sampled: str) -> dict:
    """The closed document's ``source_versions``: each kind's versions seen (sorted), the
    model services' ``model@revision``, how the sources were read, and what they do not say."""
    revisions = sorted({f"{m}@{r}" if r else m for m, r in model_revisions if m})
    return {**{kind: sorted(values) for kind, values in sorted(found.items())},
            "model_revisions": revisions, "read": sampled, "not_in_evidence": dict(NOT_IN_EVIDENCE)}
