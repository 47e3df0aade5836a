#!/usr/bin/python3
"""kafka_offsets.py BOOTSTRAP GROUP TOPIC — prints "COMMITTED END": the sums
over the topic's partitions of the group's committed offsets (a partition
without one counts 0) and of the high watermarks. Reads only; it does not
join the group."""
import sys

from confluent_kafka import Consumer, TopicPartition

bootstrap, group, topic = sys.argv[1:4]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
try:
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    committed = sum(max(tp.offset, 0) for tp in c.committed(tps, timeout=10))
    end = sum(c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps)
finally:
    c.close()
print(committed, end)
