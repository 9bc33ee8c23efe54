"""An idempotent producer of the chaos run (`mirrorgate-bench chaos`), with librdkafka
(confluent-kafka) or kafka-python: the same behaviour and output as
integration/clients/java/ChaosProducer.java.

Usage: python_chaos_produce.py librdkafka|kafka-python BOOTSTRAP TOPIC NAME PER_SECOND

Sends records keyed and valued NAME-N at about PER_SECOND (acks=all, idempotence on) until a line
"stop" (or end of input) on stdin, then flushes (10 s at most) and exits. A producer whose state
turns fatal is replaced by a new one. One JSON line per event on stdout, with the time in ms:
send {k,t}, ack {k,p,o,t}, err {k,r,t} (the record may or may not have been written), done {t}.
"""

import json
import sys
import threading
import time

lock = threading.Lock()


def emit(**event):
    event["t"] = int(time.time() * 1000)
    line = json.dumps(event, separators=(",", ":"))
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Librdkafka:
    def __init__(self, bootstrap):
        from confluent_kafka import Producer

        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 30000,
            "request.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 500,
        })
        self.fatal = False

    def send(self, topic, key):
        def delivered(err, msg):
            if err is None:
                emit(e="ack", k=key, p=msg.partition(), o=msg.offset())
            else:
                if err.fatal():
                    self.fatal = True
                emit(e="err", k=key, r=str(err))

        self.producer.produce(topic, key=key.encode(), value=key.encode(), on_delivery=delivered)
        self.producer.poll(0)

    def poll(self):
        self.producer.poll(0)

    def broken(self):
        return self.fatal

    def close(self):
        self.producer.flush(10)


class KafkaPython:
    def __init__(self, bootstrap):
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            request_timeout_ms=5000,
            delivery_timeout_ms=30000,
            max_block_ms=5000,
            reconnect_backoff_max_ms=500,
        )
        self.failed = False

    def send(self, topic, key):
        def failed(ex):
            # kafka-python's idempotent producer keeps failing every later send with the same
            # error once a batch failed: the application replaces it.
            self.failed = True
            emit(e="err", k=key, r=f"{type(ex).__name__}: {ex}")

        future = self.producer.send(topic, key=key.encode(), value=key.encode())
        future.add_callback(lambda md: emit(e="ack", k=key, p=md.partition, o=md.offset))
        future.add_errback(failed)

    def poll(self):
        pass

    def broken(self):
        return self.failed

    def close(self):
        try:
            self.producer.flush(10)
        finally:
            self.producer.close(timeout=10)


def main():
    if len(sys.argv) != 6 or sys.argv[1] not in ("librdkafka", "kafka-python"):
        sys.stderr.write(__doc__)
        sys.exit(2)
    kind, bootstrap, topic, name, per_second = sys.argv[1:]
    gap = 1.0 / max(float(per_second), 0.1)
    make = Librdkafka if kind == "librdkafka" else KafkaPython
    stop = threading.Event()

    def watch_stdin():
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    producer = make(bootstrap)
    n = 0
    next_at = time.monotonic()
    while not stop.is_set():
        wait = next_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        next_at += gap
        producer.poll()
        key = f"{name}-{n}"
        emit(e="send", k=key)
        try:
            producer.send(topic, key)
        except Exception as ex:  # not handed to the client: a new producer takes over
            emit(e="err", k=key, r=f"not sent: {type(ex).__name__}: {ex}")
            try:
                producer.close()
            except Exception:
                pass
            producer = make(bootstrap)
        if producer.broken():
            try:
                producer.close()
            except Exception:
                pass
            producer = make(bootstrap)
        n += 1
    try:
        producer.close()
    except Exception as ex:
        sys.stderr.write(f"close: {ex}\n")
    emit(e="done")


if __name__ == "__main__":
    main()
