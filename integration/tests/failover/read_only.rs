//! Mirror topics are read-only while mirrored, with clear refusals that leave the producer
//! working for other topics; a failover covers the topics created just before it; and the admin
//! API refuses bad failover calls.

use super::*;

#[test]
fn local_produce_is_rejected_while_mirroring_and_accepted_after_failover() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ro");
    let other = harness::unique_topic("rw");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    harness::create_topic(&destination, &other, 1, None);
    let gw = TestGateway::start(mirror_config("ro", &[&topic]));
    wait_mirroring(&gw.admin(), "ro", 2);
    // librdkafka: rejected with a non-retriable error (it does not surface the message).
    let err = produce_one_expect_error(&gw.bootstrap(), &topic);
    assert!(err.contains("PolicyViolation"), "{err}");
    // Java: rejected fast, with the message naming the mirror and the state.
    let out = harness::rig_java(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            &gw.bootstrap(),
            "--topic",
            &topic,
            "--max-messages",
            "3",
            "--acks",
            "-1",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("producer_send_error"))
        .collect();
    assert_eq!(errors.len(), 3, "{text}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("mirror ro") && e.contains("MIRRORING")),
        "{errors:?}"
    );
    assert!(!text.contains("producer_send_success"), "{text}");
    // The same kind of producer keeps working for other topics.
    assert_eq!(
        harness::produce_keyed(&gw.bootstrap(), &other, 10, &[]).len(),
        10
    );
    // Mirror produce is accepted while MIRRORING.
    assert_eq!(
        harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 10, &[]).len(),
        10
    );
    failover(&gw.admin(), "ro");
    wait_stopped(&gw.admin(), "ro");
    assert_eq!(
        harness::produce_keyed(&gw.bootstrap(), &topic, 10, &[]).len(),
        10,
        "writable after failover"
    );
    let err = produce_one_expect_error(&gw.mirror_bootstrap(), &topic);
    assert!(
        err.contains("PolicyViolation"),
        "mirror produce after failover: {err}"
    );
    let out = harness::rig_java(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            &gw.mirror_bootstrap(),
            "--topic",
            &topic,
            "--max-messages",
            "1",
            "--acks",
            "-1",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fenced") && text.contains("STOPPED"),
        "{text}"
    );
}

/// A mirror topic created on the destination moments before the failover call, which the
/// gateway's periodic metadata refresh has not seen yet, is part of the failover: the call reads
/// the destination's metadata first. Red before: the failover covered the known topic alone.
#[test]
fn a_failover_called_right_after_a_mirror_topic_was_created_includes_it() {
    let destination = harness::cluster("destination");
    let known = harness::unique_topic("fresh-known");
    let created = harness::unique_topic("fresh-new");
    harness::create_topic(&destination, &known, 1, None);
    let mut cfg = mirror_config("fresh", &[&known, &created]);
    cfg.destination.metadata_refresh_ms = 600_000;
    let gw = TestGateway::start(cfg);
    wait_mirroring(&gw.admin(), "fresh", 1);
    harness::create_topic(&destination, &created, 2, None);
    failover(&gw.admin(), "fresh");
    wait_stopped(&gw.admin(), "fresh");
    let m = mirror_json(&gw.admin(), "fresh");
    assert_eq!(m["states"]["STOPPED"].as_u64(), Some(3), "{m}");
    assert_eq!(
        harness::produce_keyed(&gw.bootstrap(), &created, 10, &[]).len(),
        10,
        "the new topic is writable after the failover"
    );
}

#[test]
fn admin_api_refuses_bad_failover_calls_with_clear_4xx() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("adm");
    harness::create_topic(&destination, &topic, 1, None);
    let mut cfg = mirror_config("adm", &[&topic]);
    cfg.admin.token = Some(mirrorgate::config::SecretSource {
        value: Some("s3cret".into()),
        env: None,
        file: None,
    });
    let gw = TestGateway::start(cfg);
    let admin = gw.admin();
    wait_mirroring(&admin, "adm", 1);
    let call =
        |method: Method, path: &str, token: Option<&str>| admin_call(&admin, method, path, token);
    let (s, b) = call(Method::POST, "/v1/mirrors/adm/failover", None);
    assert_eq!(s, 401, "{b}");
    let (s, b) = call(Method::POST, "/v1/mirrors/adm/failover", Some("wrong"));
    assert_eq!(s, 403, "{b}");
    let (s, b) = call(Method::POST, "/v1/mirrors/nope/failover", Some("s3cret"));
    assert_eq!(s, 404, "{b}");
    assert!(b.contains("nope"));
    let (s, b) = admin_call_body(
        &admin,
        Method::POST,
        "/v1/mirrors/adm/failover",
        Some("s3cret"),
        "{not json",
    );
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("malformed JSON"), "{b}");
    let (s, b) = call(Method::GET, "/v1/mirrors/adm/failover", Some("s3cret"));
    assert_eq!(s, 405, "{b}");
    let (s, b) = call(Method::POST, "/v1/mirrors/adm/failover", Some("s3cret"));
    assert_eq!(s, 202, "{b}");
    let v: serde_json::Value = serde_json::from_str(&b).expect("json");
    let fid = v["failover_id"].as_str().expect("failover id").to_string();
    // Repeating is harmless: it joins the same failover (202) or reports it completed (409).
    let (s2, b2) = call(Method::POST, "/v1/mirrors/adm/failover", Some("s3cret"));
    match s2 {
        202 => {
            let v: serde_json::Value = serde_json::from_str(&b2).expect("json");
            assert_eq!(v["failover_id"], fid.as_str(), "the repeat joins: {b2}");
            assert_eq!(v["already_running"], true, "{b2}");
        }
        409 => assert!(
            b2.contains("already stopped") && b2.contains(&fid),
            "the repeat names the completed failover {fid}: {b2}"
        ),
        _ => panic!("repeating the failover call: {s2} {b2}"),
    }
    wait_stopped(&admin, "adm");
    let (s, b) = call(Method::POST, "/v1/mirrors/adm/failover", Some("s3cret"));
    assert_eq!(s, 409, "{b}");
    assert!(b.contains("already stopped"), "{b}");
    assert!(b.contains(&fid), "the completed failover is {fid}: {b}");
    assert_eq!(
        mirror_json(&admin, "adm")["failover_id"],
        fid.as_str(),
        "the mirror records the first call's failover"
    );
    let log = read_log(&destination, &topic, 0);
    assert_eq!(
        log.barriers.len(),
        1,
        "one barrier despite the repeated calls"
    );
}

#[test]
fn a_refused_send_leaves_the_same_producer_working_for_other_topics() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ro-same");
    let other = harness::unique_topic("rw-same");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    harness::create_topic(&destination, &other, 1, Some(&[1]));
    let gw = TestGateway::start(mirror_config("same", &[&topic]));
    wait_mirroring(&gw.admin(), "same", 1);
    let err = same_producer_refused_then_other(&gw.bootstrap(), &topic, &other);
    assert!(err.contains("PolicyViolation"), "{err}");
}

/// The same for the Kafka Java producer: one idempotent producer's send to a mirror topic fails
/// with the gateway's POLICY_VIOLATION message, then its 20 sends to another topic are
/// acknowledged, each in that topic's log at its offset with its value; nothing reached the
/// mirror topic.
#[test]
fn a_refused_send_leaves_the_same_java_producer_working_for_other_topics() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ro-java");
    let other = harness::unique_topic("rw-java");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    harness::create_topic(&destination, &other, 1, Some(&[1]));
    let gw = TestGateway::start(mirror_config("samejava", &[&topic]));
    wait_mirroring(&gw.admin(), "samejava", 1);
    let source = harness::repo().join("integration/clients/java/RefusedThenOther.java");
    let out = harness::rig_java(
        source.to_str().expect("utf-8 path"),
        &[&gw.bootstrap(), &topic, &other, "20"],
    );
    harness::expect_success("RefusedThenOther.java", &out);
    let lines = harness::json_lines(&out.stdout);
    let refused = &lines[0];
    assert_eq!(refused["refused"], true, "{refused}");
    assert_eq!(refused["error"], "PolicyViolationException", "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("is read-only") && message.contains("samejava"),
        "the gateway's message names the mirror: {refused}"
    );
    assert_eq!(lines.last().expect("done")["done"], 20, "{lines:?}");
    let log = read_log(&destination, &other, 0);
    let acked: Vec<(i64, Option<String>)> = lines
        .iter()
        .filter(|l| l.get("offset").is_some())
        .map(|l| {
            (
                l["offset"].as_i64().expect("offset"),
                l["value"].as_str().map(str::to_string),
            )
        })
        .collect();
    let logged: Vec<(i64, Option<String>)> = log
        .records
        .iter()
        .map(|r| (r.offset, r.value.clone()))
        .collect();
    assert_eq!(
        acked, logged,
        "the acknowledged records (left) are the other topic's log"
    );
    assert!(
        read_log(&destination, &topic, 0).records.is_empty(),
        "nothing reached the mirror topic"
    );
}
