"""kafka-python idempotent producer that gets its producer id *before* a failover and writes
after it (review F12), used by the integration tests.

Args: BOOTSTRAP WARM_TOPIC TOPIC COUNT KEYS PREFIX GATE_FILE TIMEOUT_MS
  1. sends one record to WARM_TOPIC and waits for its acknowledgement (the producer now holds its
     producer id and epoch);
  2. waits until GATE_FILE exists (at most TIMEOUT_MS);
  3. sends COUNT records to TOPIC at once (5 requests in flight, one record per batch): record i
     has key PREFIX-k(i % KEYS) and value PREFIX-i;
  4. flushes and closes.
Prints one JSON line per event: `warm`, `ack` (key, value, partition, offset), `error` (value,
reason), then `done`.
"""
import json
import os
import sys
import time

from kafka import KafkaProducer


def emit(**event):
    print(json.dumps(event), flush=True)


def main():
    bootstrap, warm, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    count, keys, prefix = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    gate, timeout_ms = sys.argv[7], int(sys.argv[8])
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                             linger_ms=0, batch_size=1,
                             max_in_flight_requests_per_connection=5,
                             request_timeout_ms=10000, delivery_timeout_ms=timeout_ms,
                             max_block_ms=timeout_ms)
    producer.send(warm, key=b"warm", value=("%s-warm" % prefix).encode()).get(
        timeout=timeout_ms / 1000.0)
    emit(event="warm")
    deadline = time.time() + timeout_ms / 1000.0
    while not os.path.exists(gate):
        if time.time() > deadline:
            emit(event="error", value="", reason="gate never opened")
            sys.exit(1)
        time.sleep(0.02)
    for i in range(count):
        key = "%s-k%d" % (prefix, i % keys)
        value = "%s-%d" % (prefix, i)
        f = producer.send(topic, key=key.encode(), value=value.encode())
        f.add_callback(lambda md, key=key, value=value: emit(
            event="ack", key=key, value=value, partition=md.partition, offset=md.offset))
        f.add_errback(lambda e, value=value: emit(event="error", value=value, reason=repr(e)))
    producer.flush(timeout=timeout_ms / 1000.0 + 10)
    producer.close(timeout=10)
    emit(event="done")


if __name__ == "__main__":
    main()
