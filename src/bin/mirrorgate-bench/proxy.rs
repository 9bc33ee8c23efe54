//! `mirrorgate-bench proxy`: Java perf tools directly vs through the gateway.

use std::time::Duration;

use serde_json::json;

use crate::{java, median, Clusters};

#[derive(Debug, Clone, Copy, Default)]
struct ProduceRun {
    mb_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// Parse the final summary line of ProducerPerformance:
/// `N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency, P ms 50th, ... P ms 99th, ...`
fn parse_producer(out: &str) -> Option<ProduceRun> {
    let line = out
        .lines()
        .rev()
        .find(|l| l.contains("records sent") && l.contains("50th"))?;
    let mb = line
        .split('(')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let field = |suffix: &str| -> Option<f64> {
        line.split(',')
            .find(|p| p.trim().ends_with(suffix))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(ProduceRun {
        mb_per_s: mb,
        p50_ms: field("ms 50th")?,
        p99_ms: field("ms 99th")?,
    })
}

/// Parse ConsumerPerformance's CSV line; returns fetch MB/s (excludes group join time).
fn parse_consumer(out: &str) -> Option<f64> {
    let header = out.lines().find(|l| l.contains("fetch.MB.sec"))?;
    let idx = header.split(',').position(|h| h.trim() == "fetch.MB.sec")?;
    let line = out.lines().rev().find(|l| {
        l.split(',').count() == header.split(',').count() && !l.contains("fetch.MB.sec")
    })?;
    line.split(',').nth(idx)?.trim().parse().ok()
}

fn create_topic(bootstrap: &str, topic: &str) -> Result<(), String> {
    java(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server".into(),
            bootstrap.into(),
            "--create".into(),
            "--topic".into(),
            topic.into(),
            "--replica-assignment".into(),
            "1,2".into(),
        ],
        Duration::from_secs(60),
    )
    .map(|_| ())
}

fn one_run(bootstrap: &str, topic: &str, records: u64) -> Result<(ProduceRun, f64), String> {
    let p = java(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic".into(),
            topic.into(),
            "--num-records".into(),
            records.to_string(),
            "--record-size".into(),
            "1024".into(),
            "--throughput".into(),
            "-1".into(),
            "--producer-props".into(),
            format!("bootstrap.servers={bootstrap}"),
            "acks=all".into(),
            "enable.idempotence=true".into(),
            "linger.ms=5".into(),
        ],
        Duration::from_secs(600),
    )?;
    let produce = parse_producer(&p).ok_or_else(|| format!("cannot parse producer output: {p}"))?;
    let c = java(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server".into(),
            bootstrap.into(),
            "--topic".into(),
            topic.into(),
            "--messages".into(),
            records.to_string(),
            "--timeout".into(),
            "60000".into(),
        ],
        Duration::from_secs(600),
    )?;
    let consume = parse_consumer(&c).ok_or_else(|| format!("cannot parse consumer output: {c}"))?;
    Ok((produce, consume))
}

pub fn run(quick: bool, runs: usize, records: Option<u64>) -> Result<serde_json::Value, String> {
    let runs = runs.max(3);
    let records = records.unwrap_or(if quick { 50_000 } else { 200_000 });
    let (_clusters, addrs) = Clusters::ensure(&["destination"])?;
    let destination = addrs
        .iter()
        .find(|(n, _)| n == "destination")
        .map(|(_, a)| a.split(',').next().unwrap_or_default().to_string())
        .ok_or("destination cluster not running")?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let base = 17092u16;
    let yaml = format!(
        "destination: {{ bootstrap: [\"{destination}\"] }}\n\
         listeners:\n  client: {{ bind: 127.0.0.1, port_base: {base}, max_brokers: 4 }}\n\
         admin: {{ bind: \"127.0.0.1:{}\" }}\n\
         logging: {{ level: warn }}\n",
        base + 10
    );
    let cfg = mirrorgate::config::load_str(&yaml, "bench").map_err(|e| e.to_string())?;
    let gw = rt.block_on(async {
        let gw = mirrorgate::app::Gateway::start(cfg)
            .await
            .map_err(|e| e.to_string())?;
        gw.wait_ready(Duration::from_secs(60))
            .await
            .map_err(|r| r.reasons.join("; "))?;
        Ok::<_, String>(gw)
    })?;
    let gateway = format!("127.0.0.1:{base}");
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);

    let mut direct = Vec::new();
    let mut through = Vec::new();
    for i in 0..runs {
        for (mode, bootstrap) in [
            ("direct", destination.as_str()),
            ("gateway", gateway.as_str()),
        ] {
            let topic = format!("bench-proxy-{stamp}-{mode}-{i}");
            create_topic(&destination, &topic)?;
            let (p, c) = one_run(bootstrap, &topic, records)?;
            eprintln!(
                "run {i} {mode:>7}: produce {:.1} MB/s p50 {:.0} ms p99 {:.0} ms, consume {:.1} MB/s",
                p.mb_per_s, p.p50_ms, p.p99_ms, c
            );
            if mode == "direct" {
                direct.push((p, c))
            } else {
                through.push((p, c))
            }
        }
    }
    rt.block_on(gw.shutdown());
    let med = |v: &[(ProduceRun, f64)], f: &dyn Fn(&(ProduceRun, f64)) -> f64| {
        median(v.iter().map(f).collect())
    };
    let d_tp = med(&direct, &|r| r.0.mb_per_s);
    let g_tp = med(&through, &|r| r.0.mb_per_s);
    let d_c = med(&direct, &|r| r.1);
    let g_c = med(&through, &|r| r.1);
    let d50 = med(&direct, &|r| r.0.p50_ms);
    let g50 = med(&through, &|r| r.0.p50_ms);
    let d99 = med(&direct, &|r| r.0.p99_ms);
    let g99 = med(&through, &|r| r.0.p99_ms);
    Ok(json!({
        "bench": "proxy",
        "runs": runs,
        "records": records,
        "record_size": 1024,
        "direct_mb_per_s": d_tp,
        "gateway_mb_per_s": g_tp,
        "throughput_ratio": g_tp / d_tp,
        "direct_consume_mb_per_s": d_c,
        "gateway_consume_mb_per_s": g_c,
        "consume_throughput_ratio": g_c / d_c,
        "direct_p50_ms": d50,
        "direct_p99_ms": d99,
        "gateway_p50_ms": g50,
        "gateway_p99_ms": g99,
        "p99_ratio": g99 / d99.max(1.0),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::median;

    #[test]
    fn parses_the_producer_perf_summary() {
        let out = "5000 records sent, 1000.0 records/sec (0.98 MB/sec), 3.1 ms avg latency, 180.0 ms max latency.\n\
                   50000 records sent, 24509.8 records/sec (23.94 MB/sec), 12.34 ms avg latency, 250.00 ms max latency, 5 ms 50th, 30 ms 95th, 41 ms 99th, 50 ms 99.9th.";
        let r = parse_producer(out).unwrap();
        assert_eq!((r.mb_per_s, r.p50_ms, r.p99_ms), (23.94, 5.0, 41.0));
    }

    #[test]
    fn parses_the_consumer_perf_csv() {
        let out = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n\
                   2026-11-29 08:00:00:000, 2026-11-29 08:00:03:000, 48.8281, 16.2760, 50000, 16666.6667, 300, 2700, 18.0845, 18518.5185";
        assert_eq!(parse_consumer(out), Some(18.0845));
    }

    #[test]
    fn median_of_even_and_odd_lengths() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
