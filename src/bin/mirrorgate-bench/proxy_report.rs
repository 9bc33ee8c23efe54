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
/// CPU seconds and MiB of each 50 % run, per proxy, in repetition order.
pub(crate) type Cpu50 = BTreeMap<&'static str, Vec<(f64, f64)>>;

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
    // Median over the repetitions of each 50 % run's CPU per MiB.
    let cpu_per_mib_50 = |mode: &str| -> Option<f64> {
        let v: Vec<f64> = cpu50
            .get(mode)?
            .iter()
            .filter(|(_, mib)| *mib > 0.0)
            .map(|(s, mib)| s * 1000.0 / mib)
            .collect();
        (!v.is_empty()).then(|| round2(median(v)))
    };
    let overhead = |mode: &str, pct: u32, f: &dyn Fn(&Latency) -> f64| -> Option<f64> {
        Some(round3(lat_med(mode, pct, f)? - lat_med("direct", pct, f)?))
    };
    let p50 = |r: &Latency| r.p50_ms;
    let p99 = |r: &Latency| r.p99_ms;
    let p999 = |r: &Latency| r.p999_ms;
    // The headline latency figure: each repetition's p50 minus direct's p50 in the same
    // repetition (the modes of a repetition run back to back, so they share its conditions),
    // then the median over the repetitions.
    let p50_overhead_median = |mode: &str, pct: u32| -> Option<f64> {
        let runs = lat.get(&(mode, pct))?;
        let direct = lat.get(&("direct", pct))?;
        let v: Vec<f64> = runs
            .iter()
            .zip(direct)
            .map(|(r, d)| r.p50_ms - d.p50_ms)
            .collect();
        (!v.is_empty()).then(|| round3(median(v)))
    };
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
    // The headline: per proxy, the median over repetitions of its p50 overhead at 50 % and of
    // its CPU per MiB (at 50 % and at saturation). p99 stays in `modes`: on a shared 2-core
    // machine it is noise (see docs/benchmarks.md).
    let mut headline = serde_json::Map::new();
    for &m in modes.iter().filter(|m| **m != "direct") {
        headline.insert(
            m.to_string(),
            json!({
                "p50_overhead_ms_50": p50_overhead_median(m, 50),
                "cpu_ms_per_mib_at_50": cpu_per_mib_50(m),
                "cpu_ms_per_mib": cpu_per_mib(m),
            }),
        );
    }
    let le = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a <= b),
        _ => None,
    };
    let times = |x: Option<f64>, k: f64| x.map(|x| x * k);
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
        "headline": headline,
        "targets": {
            "p99_overhead_ms_50_le_1": p99_overhead_50.map(|o| o <= 1.0),
            "gateway_cpu_le_2x_relay": cpu_vs_relay.map(|r| r <= 2.0),
            "throughput_ratio_ge_0_95": throughput_ratio.map(|r| r >= 0.95),
            "p50_overhead_50_le_relay": le(p50_overhead_median("gateway", 50), p50_overhead_median("relay", 50)),
            "p50_overhead_50_le_peer": if has_peer { le(p50_overhead_median("gateway", 50), p50_overhead_median("peer", 50)) } else { None },
            "cpu_at_50_le_1_1x_relay": le(cpu_per_mib_50("gateway"), times(cpu_per_mib_50("relay"), 1.1)),
            "cpu_le_1_1x_relay": le(gateway_cpu, times(relay_cpu, 1.1)),
            "throughput_ratio_ge_0_98": throughput_ratio.map(|r| r >= 0.98),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lat(p50_ms: f64) -> Latency {
        Latency {
            p50_ms,
            p99_ms: p50_ms * 3.0,
            p999_ms: p50_ms * 5.0,
            requests: 100,
            records: 1024,
        }
    }

    fn sat(cpu_s: Option<f64>) -> Saturation {
        Saturation {
            produce: ProduceRun {
                records_per_s: 1000.0,
                mb_per_s: 1.0,
                ..ProduceRun::default()
            },
            consume_mb_per_s: 1.0,
            cpu_s,
        }
    }

    /// Three repetitions where direct drifts: the gateway's per-repetition overheads (0.1, 0.2,
    /// 1.1) have median 0.2, while the difference of the medians would say 0.6.
    fn tables() -> (SatTable, LatTable, Cpu50) {
        let mut lat_t: LatTable = BTreeMap::new();
        for pct in RATES {
            lat_t.insert(("direct", pct), vec![lat(1.0), lat(0.5), lat(0.2)]);
            lat_t.insert(("gateway", pct), vec![lat(1.1), lat(0.7), lat(1.3)]);
            lat_t.insert(("relay", pct), vec![lat(1.3), lat(0.8), lat(0.6)]);
        }
        let mut sat_t: SatTable = BTreeMap::new();
        sat_t.insert("direct", vec![sat(None); 3]);
        sat_t.insert("gateway", vec![sat(Some(0.2)); 3]);
        sat_t.insert("relay", vec![sat(Some(0.2)); 3]);
        let mut cpu50: Cpu50 = BTreeMap::new();
        cpu50.insert("gateway", vec![(0.3, 10.0), (0.1, 10.0), (0.2, 10.0)]);
        cpu50.insert("relay", vec![(0.5, 10.0), (0.5, 10.0), (0.5, 10.0)]);
        (sat_t, lat_t, cpu50)
    }

    fn run() -> Value {
        let (s, l, c) = tables();
        report(
            &["direct", "relay", "gateway"],
            &s,
            &l,
            &c,
            1000,
            15,
            3,
            None,
            None,
            None,
            None,
            None,
        )
    }

    #[test]
    fn the_headline_p50_overhead_is_the_median_of_each_repetitions_overhead() {
        let out = run();
        assert_eq!(out["headline"]["gateway"]["p50_overhead_ms_50"], json!(0.2));
        assert_eq!(out["headline"]["relay"]["p50_overhead_ms_50"], json!(0.3));
        assert!(out["headline"].get("direct").is_none());
    }

    #[test]
    fn the_headline_cpu_at_50_is_the_median_of_each_repetitions_cpu_per_mib() {
        let out = run();
        assert_eq!(
            out["headline"]["gateway"]["cpu_ms_per_mib_at_50"],
            json!(20.0)
        );
        assert_eq!(
            out["headline"]["relay"]["cpu_ms_per_mib_at_50"],
            json!(50.0)
        );
    }

    #[test]
    fn the_targets_compare_the_gateway_with_the_relay_and_leave_the_absent_peer_open() {
        let out = run();
        let t = &out["targets"];
        assert_eq!(t["p50_overhead_50_le_relay"], json!(true));
        assert_eq!(t["cpu_at_50_le_1_1x_relay"], json!(true));
        assert_eq!(t["cpu_le_1_1x_relay"], json!(true));
        assert_eq!(t["p50_overhead_50_le_peer"], Value::Null);
        assert_eq!(t["throughput_ratio_ge_0_98"], json!(true));
    }
}
