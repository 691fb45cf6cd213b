"""The local stack: a real Apache Kafka broker (KRaft) run as a subprocess."""

from gpuledger.stack.kafka import BrokerStatus, KafkaBroker, StackError

__all__ = ["BrokerStatus", "KafkaBroker", "StackError"]
