//! docker-compose.yml must agree with config/mirrorgate.yaml and with the rig's ports, so the
//! same config and tests work against either (the stack itself runs under podman in
//! `integration/compose-test`, docs/docker.md).

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml::Value;

use crate::harness::{expect_success, parse_status, repo, rig_env, RIG_TIMEOUT};

fn load_yaml(rel: &str) -> Value {
    let path = repo().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut v: Value =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    v.apply_merge()
        .unwrap_or_else(|e| panic!("{}: merge keys: {e}", path.display()));
    v
}

fn str_list(v: &Value, what: &str) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("{what} is not a list: {v:?}"))
        .iter()
        .map(|e| {
            e.as_str()
                .unwrap_or_else(|| panic!("{what}: not a string: {e:?}"))
                .to_string()
        })
        .collect()
}

fn env_str(service: &Value, key: &str) -> String {
    let v = &service["environment"][key];
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => panic!("environment {key} missing or not a scalar: {v:?}"),
    }
}

/// Published host addresses (`127.0.0.1:PORT`) of a compose service, checked against its
/// advertised HOST listener.
fn host_addrs(compose: &Value, service: &str) -> Vec<String> {
    let s = &compose["services"][service];
    assert!(
        s.is_mapping(),
        "service {service} missing in docker-compose.yml"
    );
    let ports = str_list(&s["ports"], &format!("services.{service}.ports"));
    let mut out = Vec::new();
    for p in ports {
        // "127.0.0.1:HOST:CONTAINER"
        let parts: Vec<&str> = p.split(':').collect();
        assert_eq!(
            parts.len(),
            3,
            "{service}: port {p:?} should be IP:HOST:CONTAINER"
        );
        assert_eq!(parts[0], "127.0.0.1", "{service}: publish on loopback only");
        assert_eq!(
            parts[1], parts[2],
            "{service}: host and container port should match"
        );
        out.push(format!("{}:{}", parts[0], parts[1]));
    }
    let adv = env_str(s, "KAFKA_ADVERTISED_LISTENERS");
    for a in &out {
        assert!(
            adv.split(',').any(|l| l == format!("HOST://{a}")),
            "{service}: published {a} is not advertised as HOST://{a} ({adv})"
        );
    }
    out
}

#[test]
fn compose_ports_agree_with_config_and_rig() {
    let compose = load_yaml("docker-compose.yml");
    assert_eq!(
        compose["name"].as_str(),
        Some("mirrorgate"),
        "top-level name"
    );

    let source = host_addrs(&compose, "source-1");
    let dest1 = host_addrs(&compose, "destination-1");
    let dest2 = host_addrs(&compose, "destination-2");
    assert_eq!(source, ["127.0.0.1:19092"]);
    assert_eq!(dest1, ["127.0.0.1:29092"]);
    assert_eq!(dest2, ["127.0.0.1:29094"]);

    // Node roles and cluster ids.
    let svc = |n: &str| compose["services"][n].clone();
    for s in ["source-1", "destination-1", "destination-2"] {
        assert_eq!(
            svc(s)["image"].as_str(),
            Some("apache/kafka:4.1.1"),
            "{s} image"
        );
    }
    assert_eq!(
        env_str(&svc("source-1"), "KAFKA_PROCESS_ROLES"),
        "broker,controller"
    );
    assert_eq!(
        env_str(&svc("destination-1"), "KAFKA_PROCESS_ROLES"),
        "broker,controller"
    );
    assert_eq!(
        env_str(&svc("destination-2"), "KAFKA_PROCESS_ROLES"),
        "broker"
    );
    assert_eq!(env_str(&svc("destination-1"), "KAFKA_NODE_ID"), "1");
    assert_eq!(env_str(&svc("destination-2"), "KAFKA_NODE_ID"), "2");
    let src_id = env_str(&svc("source-1"), "CLUSTER_ID");
    let dst_id = env_str(&svc("destination-1"), "CLUSTER_ID");
    assert_eq!(env_str(&svc("destination-2"), "CLUSTER_ID"), dst_id);
    assert_ne!(src_id, dst_id);
    for id in [&src_id, &dst_id] {
        assert_eq!(
            id.len(),
            22,
            "CLUSTER_ID {id} should be a 22-char Kafka Uuid"
        );
    }

    // config/mirrorgate.yaml points at the same brokers.
    let cfg = load_yaml("config/mirrorgate.yaml");
    let dest_all: BTreeSet<String> = dest1.iter().chain(&dest2).cloned().collect();
    let cfg_dest = str_list(&cfg["destination"]["bootstrap"], "destination.bootstrap");
    assert!(!cfg_dest.is_empty());
    for a in &cfg_dest {
        assert!(
            dest_all.contains(a),
            "config destination.bootstrap {a} is not a compose destination broker"
        );
    }
    let mirrors = cfg["mirrors"].as_sequence().expect("config mirrors list");
    let mut src_seen = false;
    for m in mirrors {
        for a in str_list(&m["source"]["bootstrap"], "mirrors[].source.bootstrap") {
            if source.contains(&a) {
                src_seen = true;
            }
        }
    }
    assert!(
        src_seen,
        "no mirror in config/mirrorgate.yaml uses the compose source {source:?}"
    );

    // The rig uses the same ports (no offset).
    let out = rig_env(
        &["ports"],
        &[("MIRRORGATE_RIG_PORT_OFFSET", "0")],
        RIG_TIMEOUT,
    );
    expect_success("integration/rig ports", &out);
    let rig: BTreeMap<String, String> = parse_status(&out.stdout);
    assert_eq!(
        rig.get("source").map(String::as_str),
        Some(source.join(",").as_str())
    );
    let dest_rig: Vec<String> = dest1.iter().chain(&dest2).cloned().collect();
    assert_eq!(
        rig.get("destination").map(String::as_str),
        Some(dest_rig.join(",").as_str())
    );
}
