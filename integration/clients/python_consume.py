"""kafka-python consumer used by the integration tests.

Args: BOOTSTRAP TOPIC GROUP COUNT ISOLATION TIMEOUT_MS
Consumes TOPIC from the beginning with consumer group GROUP (isolation level ISOLATION:
read_uncommitted or read_committed) until COUNT records arrived or TIMEOUT_MS passed, keeps
polling for one more second (so that an extra record would show), commits, and prints one JSON
line per record ({"partition", "offset", "key", "value"}), then {"done": N, "positions": {...}}
with the consumer's position per partition.
"""
import json
import logging
import sys
import time

from kafka import KafkaConsumer, TopicPartition


def text(b):
    return None if b is None else b.decode("utf-8", "replace")


def emit_records(polled):
    """Prints one JSON line per record of a poll() result; returns how many."""
    n = 0
    for batch in polled.values():
        for r in batch:
            print(json.dumps({"partition": r.partition, "offset": r.offset,
                              "key": text(r.key), "value": text(r.value)}), flush=True)
            n += 1
    return n


def main():
    # kafka-python's own log (group joins, fetch errors) goes to stderr, shown when a test fails.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    bootstrap, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    count, isolation, timeout_ms = int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             isolation_level=isolation, consumer_timeout_ms=500)
    seen = 0
    deadline = time.time() + timeout_ms / 1000.0
    # kafka-python 3.0.12 loses an assignment when a short poll() expires during a rebalance that
    # a metadata change started (the first join often sees no partitions yet and rejoins): the
    # leader's assignment makes the client think no rejoin is needed, and the finished join is
    # never applied, so the consumer sits with no partitions. Seen under CPU load in CI. Polling
    # in 5 s steps until partitions are assigned lets the join finish inside one poll() call.
    while not consumer.assignment() and time.time() < deadline:
        step_ms = min(5000, int((deadline - time.time()) * 1000))
        seen += emit_records(consumer.poll(timeout_ms=max(1, step_ms)))
    extra_until = None
    while time.time() < deadline:
        seen += emit_records(consumer.poll(timeout_ms=200))
        if seen >= count and extra_until is None:
            extra_until = time.time() + 1.0
        if extra_until is not None and time.time() >= extra_until:
            break
    consumer.commit()
    positions = {str(tp.partition): consumer.position(tp) for tp in consumer.assignment()}
    consumer.close()
    print(json.dumps({"done": seen, "positions": positions}), flush=True)


if __name__ == "__main__":
    main()
