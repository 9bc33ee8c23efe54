//! The gateway's Prometheus metrics.
//!
//! Owns: the registry and every `mirrorgate_` metric family, and per-API handles precomputed
//! so that the request path does not hash label values.
//! Must not touch: sockets or gateway state; other modules call into it to record what happened.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::ApiKey;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Which listener a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenerKind {
    /// Ordinary clients: local traffic.
    Client,
    /// Mirroring tools: mirror traffic.
    Mirror,
    /// Applications of a mirror's forward listener: local traffic on whichever cluster is
    /// active (the source until the mirror fails over, the destination after).
    Forward,
}

impl ListenerKind {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerKind::Client => "client",
            ListenerKind::Mirror => "mirror",
            ListenerKind::Forward => "forward",
        }
    }
}

/// The gateway's Prometheus registry, which also remembers the name of every family registered
/// in it: a vector with no series yet is not rendered, but it is still declared (tests use
/// [`Metrics::declared_families`] to tell a zero from a misspelt name).
pub struct MetricsRegistry {
    inner: Registry,
    families: Mutex<BTreeSet<String>>,
}

impl MetricsRegistry {
    fn new() -> Self {
        MetricsRegistry {
            inner: Registry::new(),
            families: Mutex::new(BTreeSet::new()),
        }
    }

    /// Register a collector (as [`Registry::register`]) and remember its family names.
    pub fn register(&self, c: Box<dyn prometheus::core::Collector>) -> prometheus::Result<()> {
        let names: Vec<String> = c.desc().iter().map(|d| d.fq_name.clone()).collect();
        let result = self.inner.register(c);
        if result.is_ok() {
            self.families
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(names);
        }
        result
    }

    /// Every registered family's samples (as [`Registry::gather`]).
    pub fn gather(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.inner.gather()
    }
}

/// Every metric family of the gateway.
pub struct Metrics {
    registry: MetricsRegistry,
    /// `mirrorgate_connections{listener}`: open client connections.
    pub connections: IntGaugeVec,
    /// `mirrorgate_connections_total{listener}`: accepted client connections.
    pub connections_total: IntCounterVec,
    /// `mirrorgate_requests_total{listener,api}`.
    pub requests: IntCounterVec,
    /// `mirrorgate_request_errors_total{listener,kind}`: refused frames, upstream failures.
    pub errors: IntCounterVec,
    /// `mirrorgate_request_duration_seconds{api}`: request forwarded → response written.
    pub latency: HistogramVec,
    /// `mirrorgate_bytes_total{listener,direction}`: `in` from clients, `out` to clients.
    pub bytes: IntCounterVec,
    /// `mirrorgate_upstream_connections{node}`: open connections to each destination broker.
    pub upstream_connections: IntGaugeVec,
    /// `mirrorgate_upstream_connections_total{node}`: connections opened to each destination broker.
    pub upstream_connections_total: IntCounterVec,
    /// `mirrorgate_upstream_brokers`: brokers known from destination metadata.
    pub upstream_brokers: IntGauge,
    /// `mirrorgate_metadata_refresh_total{result}`.
    pub metadata_refresh: IntCounterVec,
    /// `mirrorgate_unmapped_endpoints_total`: broker endpoints removed from responses because
    /// their node id has no gateway port.
    pub unmapped_endpoints: IntCounter,
    /// `mirrorgate_ready`: 1 when the gateway is ready.
    pub ready: IntGauge,
    /// `mirrorgate_tls_reloads_total{listener,result}`: certificate file changes, `ok` (new
    /// certificate in service) or `error` (rejected; the previous one stays).
    pub tls_reloads: IntCounterVec,
    /// `mirrorgate_tls_certificate_not_after_seconds{listener}`: expiry of the served leaf.
    pub tls_not_after: IntGaugeVec,
}

/// Precomputed per-API handles for one listener.
pub struct ApiHandles {
    requests: Vec<Option<IntCounter>>,
    latency: Vec<Option<Histogram>>,
    /// Bytes received from clients.
    pub bytes_in: IntCounter,
    /// Bytes sent to clients.
    pub bytes_out: IntCounter,
}

impl ApiHandles {
    /// Count a request of `key`.
    pub fn request(&self, key: ApiKey) {
        if let Some(Some(c)) = self.requests.get(key as usize) {
            c.inc();
        }
    }
    /// Observe the latency of a request of `key`.
    pub fn latency(&self, key: ApiKey, seconds: f64) {
        if let Some(Some(h)) = self.latency.get(key as usize) {
            h.observe(seconds);
        }
    }
}

fn api_name(key: ApiKey) -> String {
    format!("{key:?}")
}

impl Metrics {
    /// Create and register every family.
    pub fn new() -> Arc<Self> {
        let registry = MetricsRegistry::new();
        let m = Metrics {
            connections: IntGaugeVec::new(
                Opts::new("mirrorgate_connections", "Open client connections per listener."),
                &["listener"],
            )
            .expect("valid metric"),
            connections_total: IntCounterVec::new(
                Opts::new("mirrorgate_connections_total", "Accepted client connections per listener."),
                &["listener"],
            )
            .expect("valid metric"),
            requests: IntCounterVec::new(
                Opts::new("mirrorgate_requests_total", "Requests forwarded, by listener and API."),
                &["listener", "api"],
            )
            .expect("valid metric"),
            errors: IntCounterVec::new(
                Opts::new(
                    "mirrorgate_request_errors_total",
                    "Refused frames and failed exchanges, by listener and kind.",
                ),
                &["listener", "kind"],
            )
            .expect("valid metric"),
            latency: HistogramVec::new(
                HistogramOpts::new(
                    "mirrorgate_request_duration_seconds",
                    "Time from forwarding a request to writing its response, by API.",
                )
                .buckets(vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0,
                ]),
                &["api"],
            )
            .expect("valid metric"),
            bytes: IntCounterVec::new(
                Opts::new("mirrorgate_bytes_total", "Bytes from (in) and to (out) clients."),
                &["listener", "direction"],
            )
            .expect("valid metric"),
            upstream_connections: IntGaugeVec::new(
                Opts::new("mirrorgate_upstream_connections", "Open connections to each destination broker."),
                &["node"],
            )
            .expect("valid metric"),
            upstream_connections_total: IntCounterVec::new(
                Opts::new(
                    "mirrorgate_upstream_connections_total",
                    "Connections opened to each destination broker.",
                ),
                &["node"],
            )
            .expect("valid metric"),
            upstream_brokers: IntGauge::new(
                "mirrorgate_upstream_brokers",
                "Destination brokers known from metadata.",
            )
            .expect("valid metric"),
            metadata_refresh: IntCounterVec::new(
                Opts::new("mirrorgate_metadata_refresh_total", "Destination metadata refreshes by result."),
                &["result"],
            )
            .expect("valid metric"),
            unmapped_endpoints: IntCounter::new(
                "mirrorgate_unmapped_endpoints_total",
                "Broker endpoints removed from responses because no gateway port serves their node id.",
            )
            .expect("valid metric"),
            ready: IntGauge::new("mirrorgate_ready", "1 when the gateway is ready to serve.")
                .expect("valid metric"),
            tls_reloads: IntCounterVec::new(
                Opts::new(
                    "mirrorgate_tls_reloads_total",
                    "Changes of a listener's TLS certificate files: ok (in service) or error (rejected, previous certificate kept).",
                ),
                &["listener", "result"],
            )
            .expect("valid metric"),
            tls_not_after: IntGaugeVec::new(
                Opts::new(
                    "mirrorgate_tls_certificate_not_after_seconds",
                    "Expiry (unix seconds) of the leaf certificate a listener serves.",
                ),
                &["listener"],
            )
            .expect("valid metric"),
            registry,
        };
        for c in [
            Box::new(m.connections.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.connections_total.clone()),
            Box::new(m.requests.clone()),
            Box::new(m.errors.clone()),
            Box::new(m.latency.clone()),
            Box::new(m.bytes.clone()),
            Box::new(m.upstream_connections.clone()),
            Box::new(m.upstream_connections_total.clone()),
            Box::new(m.upstream_brokers.clone()),
            Box::new(m.metadata_refresh.clone()),
            Box::new(m.unmapped_endpoints.clone()),
            Box::new(m.ready.clone()),
            Box::new(m.tls_reloads.clone()),
            Box::new(m.tls_not_after.clone()),
        ] {
            m.registry.register(c).expect("metric registered once");
        }
        Arc::new(m)
    }

    /// Per-API handles for `listener`.
    pub fn api_handles(&self, listener: ListenerKind) -> ApiHandles {
        let l = listener.as_str();
        let max = ApiKey::iter().map(|k| k as usize).max().unwrap_or(0);
        let mut requests = vec![None; max + 1];
        let mut latency = vec![None; max + 1];
        for key in ApiKey::iter() {
            let name = api_name(key);
            requests[key as usize] = Some(self.requests.with_label_values(&[l, &name]));
            latency[key as usize] = Some(self.latency.with_label_values(&[&name]));
        }
        ApiHandles {
            requests,
            latency,
            bytes_in: self.bytes.with_label_values(&[l, "in"]),
            bytes_out: self.bytes.with_label_values(&[l, "out"]),
        }
    }

    /// Count an error of `kind` on `listener`.
    pub fn error(&self, listener: ListenerKind, kind: &str) {
        self.errors
            .with_label_values(&[listener.as_str(), kind])
            .inc();
    }

    /// The registry (other modules register their own families here).
    pub fn registry(&self) -> &MetricsRegistry {
        &self.registry
    }

    /// The name of every family registered so far, whether or not it has a series yet: those
    /// whose collector describes them, and those a collector without descriptions (one that
    /// builds its families on each scrape) renders now.
    pub fn declared_families(&self) -> BTreeSet<String> {
        let mut names = self
            .registry
            .families
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        names.extend(self.registry.gather().iter().map(|f| f.name().to_string()));
        names
    }

    /// Text exposition of every family.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counted_requests_by_api_and_listener() {
        let m = Metrics::new();
        let h = m.api_handles(ListenerKind::Client);
        h.request(ApiKey::Metadata);
        h.latency(ApiKey::Metadata, 0.002);
        let text = m.render();
        assert!(
            text.contains(r#"mirrorgate_requests_total{api="Metadata",listener="client"} 1"#),
            "{text}"
        );
        assert!(text.contains("mirrorgate_request_duration_seconds_bucket"));
    }

    #[test]
    fn a_family_without_series_is_declared_but_not_rendered() {
        let m = Metrics::new();
        let declared = m.declared_families();
        assert!(
            declared.contains("mirrorgate_tls_reloads_total"),
            "{declared:?}"
        );
        assert!(!m.render().contains("mirrorgate_tls_reloads_total"));
        assert!(!declared.contains("mirrorgate_tls_reload_total"));
        let extra = IntCounter::new("mirrorgate_extra_total", "An extra family.").expect("valid");
        m.registry().register(Box::new(extra)).expect("registers");
        assert!(m.declared_families().contains("mirrorgate_extra_total"));
    }

    /// A collector that builds its family on each scrape (no descriptions).
    struct Scraped;

    impl prometheus::core::Collector for Scraped {
        fn desc(&self) -> Vec<&prometheus::core::Desc> {
            Vec::new()
        }
        fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
            let g = IntGauge::new("mirrorgate_scraped", "Built on each scrape.").expect("valid");
            prometheus::core::Collector::collect(&g)
        }
    }

    #[test]
    fn a_family_built_on_each_scrape_is_declared() {
        let m = Metrics::new();
        m.registry().register(Box::new(Scraped)).expect("registers");
        assert!(m.declared_families().contains("mirrorgate_scraped"));
    }
}
