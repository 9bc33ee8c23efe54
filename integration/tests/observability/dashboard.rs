//! The Grafana dashboard: valid JSON, bound to the provisioned datasource, every query naming
//! metrics the gateway defines.

use super::*;

#[test]
fn dashboard_is_valid_grafana_json_bound_to_the_provisioned_datasource() {
    let d = dashboard();
    let (ds_name, ds_uid, _) = provisioned_datasource();
    assert!(
        d["schemaVersion"].as_i64().is_some_and(|v| v >= 39),
        "schemaVersion >= 39: {}",
        d["schemaVersion"]
    );
    assert!(d["uid"]
        .as_str()
        .is_some_and(|u| !u.is_empty() && u.len() <= 40));
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));

    let check_ds = |what: &str, ds: &Json| {
        assert_eq!(ds["type"], "prometheus", "{what}: datasource type: {ds}");
        assert_eq!(
            ds["uid"].as_str(),
            Some(ds_uid.as_str()),
            "{what}: datasource uid must be the provisioned {ds_uid:?} ({ds_name}): {ds}"
        );
    };

    let mut ids = BTreeSet::new();
    let mut n_queries = 0;
    for p in all_panels(&d) {
        let id = p["id"]
            .as_i64()
            .unwrap_or_else(|| panic!("panel without id: {p}"));
        let title = p["title"].as_str().unwrap_or("?");
        assert!(ids.insert(id), "panel id {id} ({title}) is not unique");
        let g = &p["gridPos"];
        let (x, w, h) = (g["x"].as_i64(), g["w"].as_i64(), g["h"].as_i64());
        assert!(
            matches!((x, w, h), (Some(x), Some(w), Some(h)) if x >= 0 && w > 0 && h > 0 && x + w <= 24)
                && g["y"].as_i64().is_some(),
            "panel {title}: gridPos {g}"
        );
        if p["type"] == "row" {
            continue;
        }
        assert!(p["type"].as_str().is_some_and(|t| !t.is_empty()));
        check_ds(&format!("panel {title}"), &p["datasource"]);
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {title}: no targets"));
        assert!(!targets.is_empty(), "panel {title}: no targets");
        let mut refs = BTreeSet::new();
        for t in targets {
            let r = t["refId"].as_str().unwrap_or("");
            assert!(
                !r.is_empty() && refs.insert(r),
                "panel {title}: refId {r:?}"
            );
            if !t["datasource"].is_null() {
                check_ds(&format!("panel {title} target {r}"), &t["datasource"]);
            }
            let expr = t["expr"].as_str().unwrap_or("");
            assert!(!expr.trim().is_empty(), "panel {title} target {r}: no expr");
            n_queries += 1;
        }
    }
    assert!(n_queries >= 20, "only {n_queries} queries");

    // Template variables: mirror and topic, label_values queries on the provisioned datasource.
    let vars = template_variables(&d);
    let names: BTreeSet<&str> = vars.iter().map(|v| v.0.as_str()).collect();
    for want in ["mirror", "topic"] {
        assert!(names.contains(want), "template variable {want} missing");
    }
    for v in d["templating"]["list"].as_array().expect("list") {
        check_ds(&format!("variable {}", v["name"]), &v["datasource"]);
        assert_eq!(v["type"], "query");
    }

    // Every $variable used is a template variable or a Grafana built-in.
    let var_re = regex::Regex::new(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)").expect("regex");
    let builtins: BTreeSet<&str> = GRAFANA_BUILTINS
        .iter()
        .map(|(b, _)| b.trim_start_matches('$'))
        .collect();
    let defined = defined_metrics();
    let mut used = BTreeSet::new();
    for (title, r, expr) in dashboard_queries(&d) {
        for c in var_re.captures_iter(&expr) {
            let v = &c[1];
            assert!(
                names.contains(v) || builtins.contains(v),
                "panel {title} {r}: unknown variable ${v} in {expr}"
            );
        }
        for m in metric_names(&expr) {
            assert!(
                defined.contains(&m),
                "panel {title} {r}: {m} is not a metric defined in src/ ({expr})"
            );
            used.insert(m);
        }
    }
    for (name, sel, _) in &vars {
        for m in metric_names(sel) {
            assert!(defined.contains(&m), "variable {name}: unknown metric {m}");
        }
    }
    // The panels the issue asks for.
    for m in [
        "mirrorgate_mirror_partitions",
        "mirrorgate_psm_producers",
        "mirrorgate_barriers_written_total",
        "mirrorgate_barriers_seen_total",
        "mirrorgate_pid_screened_total",
        "mirrorgate_duplicate_ack_guard_total",
        "mirrorgate_produce_rejected_total",
        "mirrorgate_mirror_lag_records",
        "mirrorgate_mirror_lag_seconds",
        "mirrorgate_requests_total",
        "mirrorgate_request_duration_seconds",
        "mirrorgate_connections",
        "mirrorgate_failover_duration_seconds",
        "mirrorgate_ready",
    ] {
        assert!(used.contains(m), "no panel queries {m}");
    }
    let text = read("dashboards/mirrorgate.json");
    assert!(
        text.contains("histogram_quantile(")
            && text.contains("mirrorgate_request_duration_seconds_bucket"),
        "request latency per API uses histogram_quantile"
    );
}

// ------------------------------------------------------------------------------ compose
