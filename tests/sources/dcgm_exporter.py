"""dcgm-exporter's ``/metrics`` for tests: serves a real scrape from tests/fixtures/dcgm
(``set_body`` switches it, ``status`` makes it fail, ``stop``/``start`` take it away)."""

from __future__ import annotations

from pathlib import Path

from sources.metrics_http import MetricsServer

__all__ = ["DcgmExporter", "SCRAPES", "real_scrape"]

SCRAPES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"


def real_scrape(name: str = "dcgm-metrics-k8s-h100.txt") -> str:
    return (SCRAPES / name).read_text()


class DcgmExporter(MetricsServer):
    def __init__(self, body: str | None = None, port: int = 0) -> None:
        self.body = real_scrape() if body is None else body
        super().__init__(lambda: self.body, port)

    def set_body(self, body: str) -> None:
        self.body = body
