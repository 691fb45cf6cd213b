"""The pure core: plain values in, plain values out.

No Kafka, ClickHouse, environment or clock imports (a test scans for them). Time is an
argument in epoch milliseconds (names end in ``_ms``); every interval is half-open
``[from, to)`` in event time, UTC.
"""
