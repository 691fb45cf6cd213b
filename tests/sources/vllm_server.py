"""vLLM's ``/metrics`` for tests: the real scrape of tests/fixtures/inference, with the
endpoint totals (prompt and generation tokens, finished requests by reason) set by the test
(``serve``: a finished request; ``restart``: counters back to 0). Other series are verbatim."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from sources.metrics_http import MetricsServer

__all__ = ["FIXTURE_MODEL", "VllmServer"]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "inference" / "vllm-metrics-qwen2.5-0.5b.txt"
FIXTURE_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
_TOTAL = re.compile(r'^(vllm:(prompt_tokens_total|generation_tokens_total|request_success_total))\{(.*)\} \S+$')
_REASON = re.compile(r'finished_reason="([^"]*)"')


class VllmServer(MetricsServer):
    def __init__(self, models: tuple[str, ...] = (FIXTURE_MODEL,), port: int = 0) -> None:
        self.models = models
        self.template = FIXTURE.read_text()
        self._counts_lock = threading.Lock()
        self.restart()
        super().__init__(self._render, port)

    def restart(self) -> None:
        with self._counts_lock:
            self.counts = {m: {"prompt_tokens_total": 0, "generation_tokens_total": 0, "success": {}} for m in self.models}

    def serve(self, model: str, prompt_tokens: int, generation_tokens: int, finished_reason: str = "stop") -> None:
        with self._counts_lock:
            c = self.counts[model]
            c["prompt_tokens_total"] += prompt_tokens
            c["generation_tokens_total"] += generation_tokens
            c["success"][finished_reason] = c["success"].get(finished_reason, 0) + 1

    def _render(self) -> str:
        out = []
        with self._counts_lock:
            for line in self.template.splitlines():
                found = _TOTAL.match(line)
                if found is None:
                    out.append(line)
                    continue
                name, family, labels = found.groups()
                for model in self.models:
                    c = self.counts[model]
                    if family == "request_success_total":
                        value = c["success"].get(_REASON.search(labels).group(1), 0)
                    else:
                        value = c[family]
                    model_labels = labels.replace(f'model_name="{FIXTURE_MODEL}"', f'model_name="{model}"')
                    out.append(f"{name}{{{model_labels}}} {float(value)}")
        return "\n".join(out) + "\n"
