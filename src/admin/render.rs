//! Readable text of admin API answers, for the command line (`mirrorgate failover --dry-run`).
//!
//! Owns: the layout. Must not touch: the answers' content (the admin API's JSON).

/// A preflight answer (JSON) as a readable table.
pub fn preflight_table(v: &serde_json::Value) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "mirror {}: {}",
        v["mirror"].as_str().unwrap_or("?"),
        v["verdict"].as_str().unwrap_or("?").to_uppercase()
    );
    for r in v["reasons"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  no-go: {}", r.as_str().unwrap_or_default());
    }
    for w in v["warnings"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  note:  {}", w.as_str().unwrap_or_default());
    }
    let _ = writeln!(
        out,
        "{:<40} {:<10} {:>10} {:>11} {:>9} {:>7} {:>9} {:>5}",
        "partition", "state", "lag_rec", "lag_bytes~", "lag_s", "leader", "producers", "txns"
    );
    let opt = |x: &serde_json::Value| {
        if x.is_null() {
            "-".to_string()
        } else {
            x.to_string()
        }
    };
    for p in v["partitions"].as_array().into_iter().flatten() {
        let lag_s = p["lag_seconds"]
            .as_f64()
            .map_or("-".to_string(), |s| format!("{s:.1}"));
        let _ = writeln!(
            out,
            "{:<40} {:<10} {:>10} {:>11} {:>9} {:>7} {:>9} {:>5}",
            format!("{}-{}", p["topic"].as_str().unwrap_or("?"), p["partition"]),
            p["state"].as_str().unwrap_or("?"),
            opt(&p["lag_records"]),
            opt(&p["lag_bytes_estimate"]),
            lag_s,
            opt(&p["leader"]),
            format!(
                "{}{}",
                p["psm_producers"],
                if p["psm_ready"] == true {
                    ""
                } else {
                    " (not rebuilt)"
                }
            ),
            p["open_transactions"]
        );
    }
    let t = &v["totals"];
    let _ = writeln!(
        out,
        "total: {} partitions, {} FAILED, {} records (~{} bytes) behind, max {:.1} s behind, {} open transactions",
        t["partitions"],
        t["failed"],
        t["lag_records"],
        t["lag_bytes_estimate"],
        t["max_lag_seconds"].as_f64().unwrap_or(0.0),
        t["open_transactions"]
    );
    let e = &v["expected_duration"];
    if let Some(s) = e["seconds"].as_f64() {
        let _ = writeln!(out, "expected duration: {s:.1} s");
        for b in e["basis"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  {}", b.as_str().unwrap_or_default());
        }
    }
    out
}

/// A failover report (JSON) as readable text.
pub fn report_text(v: &serde_json::Value) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let num = |x: &serde_json::Value| {
        if x.is_null() {
            "unknown".to_string()
        } else {
            x.to_string()
        }
    };
    let t = &v["totals"];
    let _ = writeln!(
        out,
        "failover {} of mirror {}: RTO {} s, RPO {} records (max {} s behind), called by {}{}",
        v["failover_id"].as_str().unwrap_or("?"),
        v["mirror"].as_str().unwrap_or("?"),
        num(&v["rto_seconds"]),
        num(&t["rpo_records"]),
        num(&t["max_rpo_seconds"]),
        v["called_by"].as_str().unwrap_or("?"),
        if v["forced"] == true { " (forced)" } else { "" }
    );
    let _ = writeln!(
        out,
        "{:<40} {:>12} {:>12} {:>10} {:>10} {:>9} {:>8} {:>6}",
        "partition", "last_src", "last_dst", "barrier", "rpo_rec", "rpo_s", "expired", "txns"
    );
    for p in v["partitions"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:<40} {:>12} {:>12} {:>10} {:>10} {:>9} {:>8} {:>6}{}",
            format!("{}-{}", p["topic"].as_str().unwrap_or("?"), p["partition"]),
            num(&p["last_mirrored_source_offset"]),
            num(&p["last_mirrored_destination_offset"]),
            num(&p["barrier_offset"]),
            num(&p["rpo_records"]),
            num(&p["rpo_seconds"]),
            p["producers_expired"],
            p["transactions_aborted"].as_array().map_or(0, |a| a.len()),
            match p["last_error"].as_str() {
                Some(e) => format!("  FAILED before: {e}"),
                None => String::new(),
            }
        );
    }
    let called = v["called_ms"].as_i64().unwrap_or(0);
    let steps = v["steps"].as_array().into_iter().flatten();
    let timeline: Vec<String> = steps
        .map(|s| {
            format!(
                "{} +{:.3} s",
                s["step"].as_str().unwrap_or("?"),
                (s["last_ms"].as_i64().unwrap_or(called) - called).max(0) as f64 / 1000.0
            )
        })
        .collect();
    if !timeline.is_empty() {
        let _ = writeln!(
            out,
            "steps (the last partition at each): {}",
            timeline.join(", ")
        );
    }
    let g = &v["final_group_sync"];
    if let Some(outcome) = g["outcome"].as_str() {
        let _ = write!(
            out,
            "group offset sync, final round: {outcome}, {} group(s) synced",
            num(&g["groups_synced"])
        );
        if let Some(e) = g["error"].as_str() {
            let _ = write!(out, "; {e}");
        }
        let _ = writeln!(out);
        for n in g["groups_not_synced"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "  not synced: {} ({}: {})",
                n["group"].as_str().unwrap_or("?"),
                n["why"].as_str().unwrap_or("?"),
                n["reason"].as_str().unwrap_or("?")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_says_which_groups_the_final_round_did_not_sync_and_why() {
        let v = serde_json::json!({
            "failover_id": "f", "mirror": "m", "called_by": "x", "totals": {},
            "final_group_sync": {
                "outcome": "incomplete", "groups_synced": 1,
                "error": "cannot list the source's groups: refused",
                "groups_not_synced": [{"group": "g", "why": "round_incomplete",
                    "reason": "cannot list the source's groups: refused"}],
                "ended_ms": 1
            }
        });
        let text = report_text(&v);
        assert!(
            text.contains("group offset sync, final round: incomplete, 1 group(s) synced; cannot list the source's groups: refused"),
            "{text}"
        );
        assert!(
            text.contains(
                "  not synced: g (round_incomplete: cannot list the source's groups: refused)"
            ),
            "{text}"
        );
    }
}
