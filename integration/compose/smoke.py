"""The smoke through the compose stack (run by integration/compose-test with kafka-python from
integration/clients): what a user of docker-compose.yml does on the first day, checked.

1. records produced to `demo` on the source (127.0.0.1:19092), idempotent;
2. the built-in agent of instance gw-a mirrors them: the destination holds them, same keys and
   values, in order;
3. a write to `demo` through gateway gw-a's client listener is refused (read-only while
   mirrored), and a read through it returns the mirrored records;
4. POST /v1/mirrors/demo/failover on gw-b (a dry run first), with the admin token; the
   partitions of both instances reach STOPPED;
5. a local write to `demo` through each gateway is accepted and read back;
6. Prometheus (127.0.0.1:9090) scrapes both gateways (targets up, both instances' partitions
   STOPPED in `mirrorgate_mirror_partitions`) with the alert rules of config/alerts.yml loaded.

Every wait is bounded; a failure names what was seen.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

SOURCE = "127.0.0.1:19092"
DESTINATION = "127.0.0.1:29092"
GW_A = "127.0.0.1:9092"
GW_B = "127.0.0.1:9094"
ADMIN_A = "http://127.0.0.1:9180"
ADMIN_B = "http://127.0.0.1:9181"
PROMETHEUS = "http://127.0.0.1:9090"
TOKEN = os.environ.get("MIRRORGATE_ADMIN_TOKEN", "mirrorgate-local-token")
TOPIC = "demo"
MIRROR = "demo"
N = 200


def say(msg):
    print(f"smoke: {msg}", flush=True)


def wait_for(what, timeout, cond):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ok, last = cond()
        if ok:
            return last
        time.sleep(1)
    sys.exit(f"smoke FAILED: not within {timeout} s: {what}; last seen: {last}")


def http(method, url, body=None, token=None):
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text


def read_all(bootstrap, n_at_least, timeout=30):
    """(key, value) of partition 0 of `demo` from the start, once at least n are there."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=2000, request_timeout_ms=10000)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n_at_least and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=1000).values():
            out.extend((r.key, r.value) for r in recs)
    consumer.close()
    return out


def produce(bootstrap, prefix, n, **kw):
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **kw)
    futures = [producer.send(TOPIC, key=f"{prefix}-{i}".encode(),
                             value=f"value-{prefix}-{i}".encode()) for i in range(n)]
    producer.flush(timeout=30)
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close()
    return offsets


def partition_states(admin):
    status, body = http("GET", f"{admin}/v1/mirrors/{MIRROR}/partitions")
    if status != 200:
        return f"HTTP {status}: {body}"
    return [p.get("state") for p in body.get("partitions", [])]


def main():
    t0 = time.monotonic()
    admin = KafkaAdminClient(bootstrap_servers=SOURCE, request_timeout_ms=20000)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    except TopicAlreadyExistsError:
        pass
    admin.close()
    sent = [(f"src-{i}".encode(), f"value-src-{i}".encode()) for i in range(N)]
    produce(SOURCE, "src", N, enable_idempotence=True)
    say(f"{N} records produced to {TOPIC} on the source")

    got = wait_for("the agent mirrors the source's records to the destination", 120,
                   lambda: (lambda r: (r == sent, f"{len(r)} records"))(read_all(DESTINATION, N, 5)))
    say(f"the agent mirrored them: the destination holds the {N} records in order")

    try:
        produce(GW_A, "refused", 1, retries=0, max_block_ms=20000, request_timeout_ms=10000)
        sys.exit("smoke FAILED: a write to the mirrored topic through the gateway was accepted")
    except KafkaError as e:
        say(f"a write through the gateway while mirrored is refused: {type(e).__name__}")
    through = read_all(GW_A, N)
    if through[:N] != sent:
        sys.exit(f"smoke FAILED: a read through the gateway returned {len(through)} records, "
                 "not the mirrored ones")
    say("a read through the gateway returns the mirrored records")

    status, body = http("POST", f"{ADMIN_B}/v1/mirrors/{MIRROR}/failover?dry_run=true", {}, TOKEN)
    if status != 200:
        sys.exit(f"smoke FAILED: the dry run answered {status}: {body}")
    say("dry run of the failover on gw-b: 200")
    status, body = http("POST", f"{ADMIN_B}/v1/mirrors/{MIRROR}/failover", {}, TOKEN)
    if status not in (200, 202):
        sys.exit(f"smoke FAILED: the failover answered {status}: {body}")
    say(f"failover on gw-b: {status}")
    for name, admin_url in (("gw-a", ADMIN_A), ("gw-b", ADMIN_B)):
        states = wait_for(f"the partitions of {name} STOPPED", 120,
                          lambda: (lambda s: (s == ["STOPPED"], s))(partition_states(admin_url)))
        say(f"{name}: partitions {states}")

    for name, gw in (("gw-a", GW_A), ("gw-b", GW_B)):
        offsets = produce(gw, f"local-{name}", 10, enable_idempotence=True)
        say(f"a local write through {name} accepted at offsets {offsets[0]}..{offsets[-1]}")
    after = read_all(GW_A, N + 20)
    local = [kv for kv in after if kv[0].startswith(b"local-")]
    if after[:N] != sent or len(local) != 20:
        sys.exit(f"smoke FAILED: after the failover the topic holds {len(after)} records, "
                 f"{len(local)} local ones (want the {N} mirrored, then 20 local)")
    say("the topic holds the mirrored records, then the local ones")

    def targets():
        status, body = http("GET", f"{PROMETHEUS}/api/v1/targets")
        if status != 200:
            return False, f"HTTP {status}"
        active = body["data"]["activeTargets"]
        health = {t["labels"].get("instance"): t["health"] for t in active}
        return (len(health) == 2 and all(h == "up" for h in health.values())), health
    health = wait_for("Prometheus scrapes both gateways", 90, targets)
    say(f"Prometheus targets: {health}")

    def stopped_in_prometheus():
        q = urllib.request.quote(f'mirrorgate_mirror_partitions{{mirror="{MIRROR}",state="STOPPED"}} > 0')
        status, body = http("GET", f"{PROMETHEUS}/api/v1/query?query={q}")
        if status != 200:
            return False, f"HTTP {status}: {body}"
        seen = sorted(r["metric"].get("instance") for r in body["data"]["result"])
        return len(seen) == 2, seen
    seen = wait_for("both instances' partitions STOPPED in Prometheus", 90, stopped_in_prometheus)
    say(f"mirrorgate_mirror_partitions{{state=STOPPED}} scraped from {seen}")

    status, body = http("GET", f"{PROMETHEUS}/api/v1/rules")
    rules = [r["name"] for g in body.get("data", {}).get("groups", []) for r in g["rules"]] \
        if status == 200 else []
    if not rules:
        sys.exit(f"smoke FAILED: Prometheus loaded no alert rules: {status} {body}")
    say(f"Prometheus loaded {len(rules)} alert rules from alerts.yml")
    say(f"done in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
