//! The Helm chart (`deploy/helm/mirrorgate`), with the Helm that `integration/install-helm`
//! installs: it lints, and what it renders runs N gateway instances that share a state topic,
//! with probes on `/healthz` and `/readyz`, a graceful stop, a PodDisruptionBudget, a
//! ServiceMonitor, the dashboard, and a configuration the gateway accepts for every pod.

use std::process::Command;

use serde::Deserialize;
use serde_yaml::Value;

use crate::harness;

fn helm() -> Command {
    let path = std::env::var("MIRRORGATE_HELM").unwrap_or_else(|_| {
        harness::repo()
            .join("target/tools/helm-v3.22.0/helm")
            .to_string_lossy()
            .into_owned()
    });
    assert!(
        std::path::Path::new(&path).exists(),
        "no helm at {path}: run integration/install-helm"
    );
    Command::new(path)
}

fn chart() -> std::path::PathBuf {
    harness::repo().join("deploy/helm/mirrorgate")
}

fn rendered(args: &[&str]) -> Vec<Value> {
    let out = helm()
        .args(["template", "gw"])
        .arg(chart())
        .args(args)
        .output()
        .expect("helm template");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("a YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

#[test]
fn the_helm_chart_lints_strictly() {
    let out = helm()
        .args(["lint", "--strict"])
        .arg(chart())
        .output()
        .expect("helm lint");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_helm_chart_renders_instances_with_probes_a_budget_a_monitor_and_the_dashboard() {
    let docs = rendered(&[
        "--set",
        "replicas=3",
        "--set",
        "serviceMonitor.enabled=true",
    ]);
    let sts = of_kind(&docs, "StatefulSet");
    assert_eq!(sts.len(), 1);
    let sts = sts[0];
    assert_eq!(sts["spec"]["replicas"], 3);
    let pod = &sts["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(c["lifecycle"]["preStop"]["exec"]["command"].is_sequence());
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(0) >= 30);
    let init = &pod["initContainers"][0];
    let init_cmd = init["args"][0].as_str().unwrap_or("");
    assert!(init_cmd.contains("state init"), "{init_cmd}");
    let ports: Vec<u64> = c["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|p| p["containerPort"].as_u64())
        .collect();
    for p in [9180, 9092, 9093, 9094, 9192, 9193, 9194] {
        assert!(ports.contains(&p), "container port {p}: {ports:?}");
    }
    assert_eq!(of_kind(&docs, "PodDisruptionBudget").len(), 1);
    assert_eq!(of_kind(&docs, "ServiceMonitor").len(), 1);
    let dashboard = of_kind(&docs, "ConfigMap")
        .into_iter()
        .find_map(|m| m["data"]["mirrorgate.json"].as_str())
        .expect("the dashboard ConfigMap");
    let ours = std::fs::read_to_string(harness::repo().join("dashboards/mirrorgate.json"))
        .expect("dashboards/mirrorgate.json");
    assert_eq!(
        dashboard.trim_end(),
        ours.trim_end(),
        "the chart's dashboard is dashboards/mirrorgate.json (copy it into deploy/helm/mirrorgate/dashboards/)"
    );
}

#[test]
fn each_pod_of_the_helm_chart_gets_a_configuration_the_gateway_accepts_with_its_own_instance_id() {
    let docs = rendered(&[]);
    let template = of_kind(&docs, "ConfigMap")
        .into_iter()
        .find_map(|m| m["data"]["mirrorgate.yaml"].as_str())
        .expect("the config ConfigMap");
    let mut ids = std::collections::BTreeSet::new();
    for pod in ["gw-mirrorgate-0", "gw-mirrorgate-1"] {
        let text = template.replace("__INSTANCE_ID__", pod).replace(
            "__ADVERTISED_HOST__",
            &format!("{pod}.gw-mirrorgate-pods.ns.svc"),
        );
        // The token comes from the pod's environment.
        std::env::set_var("MIRRORGATE_ADMIN_TOKEN", "t");
        let cfg = mirrorgate::config::load_str(&text, "helm.yaml")
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let i = cfg.instances.expect("instances configured");
        assert_eq!(i.state_topic, "__mirrorgate_state");
        ids.insert(i.id);
    }
    assert_eq!(ids.len(), 2, "one instance id per pod");
}
