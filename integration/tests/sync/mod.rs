//! Topic config sync and ACL sync of the built-in agent (docs/configs-and-acls.md), against
//! real clusters: configs from `source` to `destination`; ACLs from `authz` (a second
//! StandardAuthorizer cluster) to `secure`, with a principal that works through the gateway
//! after the failover.

mod acls;
mod configs;

use std::time::{Duration, Instant};

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{DescribeConfigsRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::protocol::StrBytes;
use mirrorgate::client::KafkaClient;

/// Sync interval of the tests' mirrors.
pub const INTERVAL_MS: u64 = 1000;

/// Run `f` on a fresh connection to `addr` (a PLAINTEXT listener).
pub fn with_client<T>(
    addr: &str,
    f: impl for<'c> FnOnce(
        &'c mut KafkaClient,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'c>>,
) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut c = KafkaClient::connect(addr, Duration::from_secs(10))
            .await
            .expect("connect");
        f(&mut c).await
    })
}

/// Set (`Some`) or delete (`None`) a topic config at the brokers of `bootstrap`.
pub fn alter_topic_config(bootstrap: &str, topic: &str, key: &str, value: Option<&str>) {
    let addr = bootstrap.split(',').next().expect("address").to_string();
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configs(vec![AlterableConfig::default()
                .with_name(StrBytes::from_string(key.to_string()))
                .with_config_operation(if value.is_some() { 0 } else { 1 })
                .with_value(value.map(|v| StrBytes::from_string(v.to_string())))]),
    ]);
    let resp = with_client(&addr, |c| {
        Box::pin(async move { c.send(&req, 1).await.expect("IncrementalAlterConfigs") })
    });
    for r in &resp.responses {
        assert_eq!(
            r.error_code, 0,
            "alter {topic} {key}: {:?}",
            r.error_message
        );
    }
}

/// The value of `key` set on the topic itself (dynamic topic config), if any.
pub fn topic_config(bootstrap: &str, topic: &str, key: &str) -> Option<String> {
    let addr = bootstrap.split(',').next().expect("address").to_string();
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(Some(vec![StrBytes::from_string(key.to_string())]))]);
    let resp = with_client(&addr, |c| {
        Box::pin(async move { c.send(&req, 4).await.expect("DescribeConfigs") })
    });
    let r = resp.results.first().expect("one result");
    assert_eq!(r.error_code, 0, "describe {topic}: {:?}", r.error_message);
    r.configs
        .iter()
        .find(|c| c.name.as_str() == key && c.config_source == 1)
        .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
}

/// Poll `cond` every 200 ms until it holds; panic with `what` and `info()` after `timeout`.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
    info: impl Fn() -> String,
) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: {}", info());
        std::thread::sleep(Duration::from_millis(200));
    }
}
