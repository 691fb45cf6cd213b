"""The one Kafka adapter: topic names and roles, the publisher, end offsets and commits, dead
letters and the workers' changelogs. Producers, workers, the sink and replay use it; none of
them imports another's Kafka code."""
