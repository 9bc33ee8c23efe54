"""kafka-python round trip used by the integration tests.

Produces COUNT keyed records with idempotence on, then consumes them with a consumer group,
commits, and prints one JSON object: what was produced, consumed per partition (in order),
and the committed offsets read back through the same bootstrap address.
"""
import json
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def main():
    bootstrap, topic, count, group = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                             linger_ms=5, request_timeout_ms=30000)
    futures = [producer.send(topic, key=b"k%d" % i, value=b"%d" % i) for i in range(count)]
    producer.flush(timeout=60)
    acked = {}
    for f in futures:
        md = f.get(timeout=60)
        acked.setdefault(md.partition, []).append(md.offset)
    producer.close(timeout=10)

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=1000)
    consumed = {}
    deadline = time.time() + 90
    total = 0
    while total < count and time.time() < deadline:
        for msg in consumer:
            consumed.setdefault(msg.partition, []).append(int(msg.value))
            total += 1
            if total >= count:
                break
    consumer.commit()
    committed = {}
    for p in sorted(consumed):
        committed[p] = consumer.committed(TopicPartition(topic, p))
    brokers = sorted("%s:%d" % (b.host, b.port) for b in consumer._client.cluster.brokers())
    consumer.close()
    print(json.dumps({
        "acked": {str(p): len(v) for p, v in acked.items()},
        "consumed": {str(p): v for p, v in consumed.items()},
        "committed": {str(p): c for p, c in committed.items()},
        "brokers": brokers,
    }))


if __name__ == "__main__":
    main()
