//! The admin HTTP API of a gateway in front of the real destination cluster.

use std::time::{Duration, Instant};

use hyper::Method;
use mirrorgate::admin::client::call;

use crate::gw::TestGateway;
use crate::harness;

fn get(gw: &TestGateway, method: Method, path: &str) -> (u16, String) {
    let admin = gw.admin();
    gw.block_on(async move {
        call(&admin, method, path, None, None)
            .await
            .expect("admin call")
    })
}

#[test]
fn healthz_answers_ok() {
    let gw = TestGateway::in_front_of(&harness::cluster("destination"));
    assert_eq!(get(&gw, Method::GET, "/healthz"), (200, "ok\n".to_string()));
}

#[test]
fn readyz_is_ready_once_metadata_is_known_and_ports_are_bound() {
    let gw = TestGateway::in_front_of(&harness::cluster("destination"));
    let (status, body) = get(&gw, Method::GET, "/readyz");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["ready"], true);
    assert_eq!(v["metadata_known"], true);
}

#[test]
fn readyz_is_not_ready_while_the_destination_is_unreachable() {
    // A bootstrap address where nothing listens.
    let dead = format!("127.0.0.1:{}", crate::gw::free_port_range(1));
    let cfg = crate::gw::test_config(&dead);
    let rt = tokio::runtime::Runtime::new().expect("rt");
    rt.block_on(async {
        let gw = mirrorgate::app::Gateway::start(cfg)
            .await
            .expect("starts without the destination");
        let (status, body) = call(
            &gw.admin_addr().to_string(),
            Method::GET,
            "/readyz",
            None,
            None,
        )
        .await
        .expect("call");
        assert_eq!(status, 503);
        assert!(
            body.contains("destination metadata not yet known"),
            "{body}"
        );
        gw.shutdown().await;
    });
}

/// docs/reliability.md: "destination unreachable at start: `/readyz` 503 with the reason;
/// listeners come up when it is reachable". The bootstrap address is a port where nothing
/// listens until a TCP forwarder to the real destination is started there.
#[test]
fn listeners_come_up_once_an_unreachable_destination_becomes_reachable() {
    let destination = harness::cluster("destination");
    let broker = destination
        .split(',')
        .next()
        .expect("a destination broker")
        .to_string();
    let topic = harness::unique_topic("late-destination");
    harness::create_topic(&destination, &topic, 1, None);
    let late = format!("127.0.0.1:{}", crate::gw::free_port_range(1));
    let cfg = crate::gw::test_config(&late);
    let client_port = cfg.listeners.client.port_base;
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let gw = rt
        .block_on(mirrorgate::app::Gateway::start(cfg))
        .expect("starts without the destination");
    let admin = gw.admin_addr().to_string();
    let readyz = |rt: &tokio::runtime::Runtime| {
        rt.block_on(call(&admin, Method::GET, "/readyz", None, None))
            .expect("call")
    };
    // Unreachable: not ready, and no client port is bound (a few refresh attempts later).
    for _ in 0..3 {
        let (status, body) = readyz(&rt);
        assert_eq!(status, 503, "{body}");
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", client_port)).is_err(),
            "a client port is bound before the destination's brokers are known"
        );
        std::thread::sleep(Duration::from_millis(1000));
    }
    // The destination becomes reachable at the bootstrap address.
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(&late))
        .expect("bind the forwarder on the bootstrap port");
    rt.spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let broker = broker.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&broker).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = readyz(&rt);
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready 30 s after the destination became reachable: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The client listener serves: records produced through it are acknowledged.
    let acks = harness::produce_keyed(&format!("127.0.0.1:{client_port}"), &topic, 20, &[]);
    assert_eq!(acks.len(), 20, "records acknowledged through the gateway");
    rt.block_on(gw.shutdown());
}

#[test]
fn metrics_are_prometheus_text_with_the_gateway_families() {
    let gw = TestGateway::in_front_of(&harness::cluster("destination"));
    let (status, body) = get(&gw, Method::GET, "/metrics");
    assert_eq!(status, 200);
    for family in [
        "mirrorgate_ready 1",
        "mirrorgate_upstream_brokers 2",
        "mirrorgate_metadata_refresh_total",
    ] {
        assert!(body.contains(family), "missing {family} in\n{body}");
    }
}

#[test]
fn upstreams_lists_each_broker_with_its_gateway_ports() {
    let gw = TestGateway::in_front_of(&harness::cluster("destination"));
    let (status, body) = get(&gw, Method::GET, "/v1/upstreams");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let brokers = v["brokers"].as_array().expect("brokers");
    assert_eq!(brokers.len(), 2);
    for b in brokers {
        let node = b["node_id"].as_i64().expect("node id") as i32;
        let ports: Vec<&str> = b["gateway_ports"]
            .as_array()
            .expect("ports")
            .iter()
            .filter_map(|p| p["address"].as_str())
            .collect();
        assert!(
            ports.contains(&format!("127.0.0.1:{}", gw.port_for(node)).as_str()),
            "{body}"
        );
    }
}

#[test]
fn unknown_path_is_a_json_404() {
    let gw = TestGateway::in_front_of(&harness::cluster("destination"));
    let (status, body) = get(&gw, Method::GET, "/v1/nope");
    assert_eq!(status, 404);
    assert!(body.contains("no such endpoint"), "{body}");
}

#[test]
fn wrong_method_is_a_405() {
    let gw = TestGateway::in_front_of(&harness::cluster("destination"));
    let (status, _) = get(&gw, Method::POST, "/healthz");
    assert_eq!(status, 405);
}

#[test]
fn every_mutating_admin_call_needs_the_token() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("admtok");
    harness::create_topic(&destination, &topic, 1, None);
    let mut cfg = crate::failover::mirror_config("admtok", &[&topic]);
    cfg.admin.token = Some(mirrorgate::config::SecretSource {
        value: Some("t0ken".into()),
        env: None,
        file: None,
    });
    let gw = TestGateway::start(cfg);
    let admin = gw.admin();
    crate::failover::wait_mirroring(&admin, "admtok", 1);
    for action in ["pause", "resume", "start", "failover"] {
        let path = format!("/v1/mirrors/admtok/{action}");
        let (s, b) = crate::gw::admin_call(&admin, Method::POST, &path, None);
        assert_eq!(s, 401, "{action} without a token: {b}");
        let (s, b) = crate::gw::admin_call(&admin, Method::POST, &path, Some("t0kem"));
        assert_eq!(s, 403, "{action} with a wrong token: {b}");
    }
    // Nothing moved, and reads need no token.
    let m = crate::failover::mirror_json(&admin, "admtok");
    assert_eq!(m["states"]["MIRRORING"], 1, "{m}");
}
