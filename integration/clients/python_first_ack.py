"""kafka-python idempotent producer used by the integration tests (review F15).

Produces COUNT keyed records (`PREFIX-i` -> `PREFIX-value-i`) with idempotence on and prints
one JSON line per event, each with the wall-clock time in unix milliseconds: `start`, then
`ack` (key, partition, offset) or `error` (key, reason) per record. Gives up after TIMEOUT_MS
(delivery and blocking timeouts), so a producer that never gets a producer id ends.
"""
import json
import sys
import time

from kafka import KafkaProducer


def now_ms():
    return int(time.time() * 1000)


def emit(**event):
    event["ts_ms"] = now_ms()
    print(json.dumps(event), flush=True)


def main():
    bootstrap, topic, count, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    timeout_ms = int(sys.argv[5])
    emit(event="start")
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                             linger_ms=0, request_timeout_ms=min(10000, timeout_ms),
                             delivery_timeout_ms=timeout_ms, max_block_ms=timeout_ms)
    for i in range(count):
        key = "%s-%d" % (prefix, i)
        f = producer.send(topic, key=key.encode(), value=("%s-value-%d" % (prefix, i)).encode())
        f.add_callback(lambda md, key=key: emit(event="ack", key=key, partition=md.partition,
                                                offset=md.offset))
        f.add_errback(lambda e, key=key: emit(event="error", key=key, reason=repr(e)))
    producer.flush(timeout=timeout_ms / 1000.0 + 10)
    producer.close(timeout=10)


if __name__ == "__main__":
    main()
