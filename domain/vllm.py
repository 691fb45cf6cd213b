"""vLLM ``/metrics`` -> endpoint totals per model (prompt and generation tokens, successful
requests), to check request events against. Every series is accounted for: used, or
skipped with the reason."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["VllmTotals", "parse_vllm_metrics"]

_USED = {
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:request_success_total": "successful_requests",
}


@dataclass
class VllmTotals:
    per_model: dict[str, dict[str, float]] = field(default_factory=dict)
    series_used: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> series

    @property
    def series_total(self) -> int:
        return self.series_used + sum(self.skipped.values())


def parse_vllm_metrics(text: str) -> VllmTotals:
    out = VllmTotals()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = _USED.get(s.name)
            model = s.labels.get("model_name", "")
            if key is None:
                reason = ("runtime metric (not vLLM)" if not s.name.startswith("vllm:")
                          else f"not an endpoint total: {family.name}")
                out.skipped[reason] = out.skipped.get(reason, 0) + 1
            elif not model:
                out.skipped["no model_name label"] = out.skipped.get("no model_name label", 0) + 1
            else:
                totals = out.per_model.setdefault(model, dict.fromkeys(_USED.values(), 0.0))
                totals[key] += s.value  # request_success_total is split by finished_reason: summed
                out.series_used += 1
    return out
