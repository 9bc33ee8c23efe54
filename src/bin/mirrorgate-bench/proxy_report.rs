//! The figures of `mirrorgate-bench proxy`: medians per mode, overheads versus `direct`, CPU per
//! MiB, the before/after ratios against a `--baseline` gateway, and the targets, as the one JSON
//! object the benchmark prints last.
//!
//! Owns: the measurements' types (what one run found) and turning them into figures. Must not
//! touch: how they are measured (`proxy.rs`, which uses this file, never the other way round).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::latency::Latency;
use crate::median;
use crate::peer;

/// Fixed rates, in percent of the direct saturation rate.
pub(crate) const RATES: [u32; 3] = [25, 50, 75];
pub(crate) const RECORD_SIZE: u64 = 1024;

/// What ProducerPerformance reported for one saturation run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProduceRun {
    pub(crate) records_per_s: f64,
    pub(crate) mb_per_s: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) p999_ms: f64,
}

/// Figures of one saturation run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Saturation {
    pub(crate) produce: ProduceRun,
    pub(crate) consume_mb_per_s: f64,
    pub(crate) cpu_s: Option<f64>,
}

/// Saturation runs per mode.
pub(crate) type SatTable = BTreeMap<&'static str, Vec<Saturation>>;
/// Fixed-rate runs per (mode, rate in percent).
pub(crate) type LatTable = BTreeMap<(&'static str, u32), Vec<Latency>>;
/// CPU seconds and MiB of the 50 % runs, per proxy.
pub(crate) type Cpu50 = BTreeMap<&'static str, (f64, f64)>;

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn report(
    modes: &[&'static str],
    sat: &SatTable,
    lat: &LatTable,
    cpu50: &Cpu50,
    records: u64,
    rate_seconds: u64,
    runs: usize,
    gateway_rss: Option<f64>,
    relay_rss: Option<f64>,
    peer_rss: Option<f64>,
    baseline_rss: Option<f64>,
    peer_error: Option<String>,
) -> Value {
    let sat_med = |mode: &str, f: &dyn Fn(&Saturation) -> f64| -> Option<f64> {
        let v: Vec<f64> = sat.get(mode)?.iter().map(f).collect();
        Some(median(v))
    };
    let lat_med = |mode: &str, pct: u32, f: &dyn Fn(&Latency) -> f64| -> Option<f64> {
        let v: Vec<f64> = lat.get(&(mode, pct))?.iter().map(f).collect();
        Some(median(v))
    };
    // CPU ms per MiB of payload at saturation: produced and consumed records both count.
    let mib_per_run = 2.0 * (records * RECORD_SIZE) as f64 / (1024.0 * 1024.0);
    let cpu_per_mib = |mode: &str| -> Option<f64> {
        let v: Vec<f64> = sat
            .get(mode)?
            .iter()
            .filter_map(|s| s.cpu_s)
            .map(|c| c * 1000.0 / mib_per_run)
            .collect();
        (!v.is_empty()).then(|| round2(median(v)))
    };
    let cpu_per_mib_50 = |mode: &str| -> Option<f64> {
        let (s, mib) = cpu50.get(mode)?;
        (*mib > 0.0).then(|| round2(s * 1000.0 / mib))
    };
    let overhead = |mode: &str, pct: u32, f: &dyn Fn(&Latency) -> f64| -> Option<f64> {
        Some(round3(lat_med(mode, pct, f)? - lat_med("direct", pct, f)?))
    };
    let p50 = |r: &Latency| r.p50_ms;
    let p99 = |r: &Latency| r.p99_ms;
    let p999 = |r: &Latency| r.p999_ms;
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(round2(a / b)),
        _ => None,
    };

    let mut table = serde_json::Map::new();
    for &m in modes {
        let mut row = json!({
            "produce_mb_per_s": sat_med(m, &|s| s.produce.mb_per_s).map(round2),
            "produce_records_per_s": sat_med(m, &|s| s.produce.records_per_s).map(round2),
            "consume_mb_per_s": sat_med(m, &|s| s.consume_mb_per_s).map(round2),
            "cpu_ms_per_mib": cpu_per_mib(m),
            "cpu_ms_per_mib_at_50": cpu_per_mib_50(m),
        });
        for pct in RATES {
            row[format!("p50_ms_{pct}")] = json!(lat_med(m, pct, &p50));
            row[format!("p99_ms_{pct}")] = json!(lat_med(m, pct, &p99));
            row[format!("p999_ms_{pct}")] = json!(lat_med(m, pct, &p999));
            if m != "direct" {
                row[format!("p50_overhead_ms_{pct}")] = json!(overhead(m, pct, &p50));
                row[format!("p99_overhead_ms_{pct}")] = json!(overhead(m, pct, &p99));
                row[format!("p999_overhead_ms_{pct}")] = json!(overhead(m, pct, &p999));
            }
        }
        table.insert(m.to_string(), row);
    }
    let has_peer = modes.contains(&"peer");
    let throughput_ratio = ratio(
        sat_med("gateway", &|s| s.produce.mb_per_s),
        sat_med("direct", &|s| s.produce.mb_per_s),
    );
    let consume_ratio = ratio(
        sat_med("gateway", &|s| s.consume_mb_per_s),
        sat_med("direct", &|s| s.consume_mb_per_s),
    );
    let p99_overhead_50 = overhead("gateway", 50, &p99);
    let gateway_cpu = cpu_per_mib("gateway");
    let relay_cpu = cpu_per_mib("relay");
    let cpu_vs_relay = ratio(gateway_cpu, relay_cpu);
    let mut out = json!({
        "bench": "proxy",
        "runs": runs,
        "records": records,
        "record_size": RECORD_SIZE,
        "rate_seconds": rate_seconds,
        "rates_percent": RATES,
        "direct_saturation_records_per_s": sat_med("direct", &|s| s.produce.records_per_s).map(round2),
        "modes": table,
        "throughput_ratio": throughput_ratio,
        "consume_throughput_ratio": consume_ratio,
        "direct_p50_ms": lat_med("direct", 50, &p50),
        "direct_p99_ms": lat_med("direct", 50, &p99),
        "gateway_p50_ms": lat_med("gateway", 50, &p50),
        "gateway_p99_ms": lat_med("gateway", 50, &p99),
        "p99_ratio": ratio(lat_med("gateway", 50, &p99), lat_med("direct", 50, &p99).map(|d| d.max(1.0))),
        "p50_overhead_ms_50": overhead("gateway", 50, &p50),
        "p99_overhead_ms_50": p99_overhead_50,
        "p999_overhead_ms_50": overhead("gateway", 50, &p999),
        "p99_overhead_ms_75": overhead("gateway", 75, &p99),
        "relay_p99_overhead_ms_50": overhead("relay", 50, &p99),
        "gateway_cpu_ms_per_mib": gateway_cpu,
        "relay_cpu_ms_per_mib": relay_cpu,
        "gateway_cpu_vs_relay": cpu_vs_relay,
        "gateway_rss_mib": gateway_rss,
        "relay_rss_mib": relay_rss,
        "peer": if has_peer { Some(peer::NAME) } else { None },
        "peer_error": peer_error,
        "peer_p99_overhead_ms_50": if has_peer { overhead("peer", 50, &p99) } else { None },
        "peer_cpu_ms_per_mib": if has_peer { cpu_per_mib("peer") } else { None },
        "peer_rss_mib": peer_rss,
        "targets": {
            "p99_overhead_ms_50_le_1": p99_overhead_50.map(|o| o <= 1.0),
            "gateway_cpu_le_2x_relay": cpu_vs_relay.map(|r| r <= 2.0),
            "throughput_ratio_ge_0_95": throughput_ratio.map(|r| r >= 0.95),
        },
    });
    out["mirror_cpu_ms_per_mib"] = json!(cpu_per_mib("gateway-mirror"));
    out["mirror_p99_overhead_ms_50"] = json!(overhead("gateway-mirror", 50, &p99));
    out["baseline_cpu_ms_per_mib"] = json!(cpu_per_mib("baseline"));
    out["baseline_mirror_cpu_ms_per_mib"] = json!(cpu_per_mib("baseline-mirror"));
    out["cpu_vs_baseline"] = json!(ratio(gateway_cpu, cpu_per_mib("baseline")));
    out["mirror_cpu_vs_baseline"] = json!(ratio(
        cpu_per_mib("gateway-mirror"),
        cpu_per_mib("baseline-mirror")
    ));
    out["cpu_at_50_vs_baseline"] =
        json!(ratio(cpu_per_mib_50("gateway"), cpu_per_mib_50("baseline")));
    out["mirror_cpu_at_50_vs_baseline"] = json!(ratio(
        cpu_per_mib_50("gateway-mirror"),
        cpu_per_mib_50("baseline-mirror")
    ));
    out["baseline_p99_overhead_ms_50"] = json!(overhead("baseline", 50, &p99));
    out["baseline_mirror_p99_overhead_ms_50"] = json!(overhead("baseline-mirror", 50, &p99));
    out["baseline_rss_mib"] = json!(baseline_rss);
    out
}
