"""The access scripts of the demo stack (deploy/clickhouse/access.sql and logins.sh), for the
demo's tenants: ``python -m gpuledger.demo.access [--stack-logins]`` (sinks/access.py makes them
for any tenants named with ``--tenant``)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuledger.demo.plan import TENANTS
from gpuledger.sinks import access

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    return access.main(argv, default_tenants=TENANTS, prog="python -m gpuledger.demo.access")


if __name__ == "__main__":
    raise SystemExit(main())
