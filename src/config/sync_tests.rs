use super::*;

fn mirror(yaml: &str) -> MirrorConfig {
    serde_yaml::from_str(yaml).expect("mirror yaml")
}

fn issues(yaml: &str) -> Vec<(String, String)> {
    check("mirrors[0]", &mirror(yaml))
}

#[test]
fn config_sync_is_on_by_default_and_acl_sync_off() {
    let m = mirror("name: m\ntopics: [t]\n");
    assert!(m.configs.enabled);
    assert!(!m.acls.enabled);
    assert_eq!(m.configs, ConfigSyncConfig::default());
    assert_eq!(m.acls, AclSyncConfig::default());
}

#[test]
fn without_include_every_key_but_the_local_ones_is_synced() {
    let c = ConfigSyncConfig::default();
    assert!(c.syncs("retention.ms"));
    assert!(!c.syncs("min.insync.replicas"));
}

#[test]
fn an_included_local_key_is_synced() {
    let c = ConfigSyncConfig {
        include: vec!["min.insync.replicas".into()],
        ..Default::default()
    };
    assert!(c.syncs("min.insync.replicas"));
    assert!(!c.syncs("retention.ms"), "include lists every synced key");
}

#[test]
fn exclude_wins_over_the_default_set() {
    let c = ConfigSyncConfig {
        exclude: vec!["retention.ms".into()],
        ..Default::default()
    };
    assert!(!c.syncs("retention.ms"));
}

#[test]
fn a_key_both_included_and_excluded_is_an_error() {
    let out = issues(
        "name: m\ntopics: [t]\nconfigs: {include: [retention.ms], exclude: [retention.ms]}\n",
    );
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, "mirrors[0].configs.include[0]");
}

#[test]
fn a_sync_interval_below_one_second_is_an_error() {
    let out = issues("name: m\ntopics: [t]\nconfigs: {sync_interval_ms: 10}\n");
    assert_eq!(out[0].0, "mirrors[0].configs.sync_interval_ms");
}

#[test]
fn acl_sync_without_a_source_is_an_error() {
    let out = issues("name: m\ntopics: [t]\nacls: {enabled: true}\n");
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, "mirrors[0].acls.enabled");
}

#[test]
fn an_unknown_resource_kind_is_an_error_naming_the_entry() {
    let out = issues("name: m\ntopics: [t]\nacls: {include: [topic, cluster]}\n");
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, "mirrors[0].acls.include[1]");
    assert!(out[0].1.contains("cluster"), "{}", out[0].1);
}

#[test]
fn a_bad_principal_regex_is_an_error() {
    let out = issues("name: m\ntopics: [t]\nacls: {principals: {include: ['regex:(']}}\n");
    assert_eq!(out[0].0, "mirrors[0].acls.principals.include[0]");
}

#[test]
fn the_selector_takes_included_resources_of_included_principals() {
    let sel = AclSelector::compile(&AclSyncConfig {
        include: vec!["topic".into(), "group:regex:app-.*".into()],
        exclude: vec!["topic:secret".into()],
        principals: PrincipalFilterConfig {
            include: vec![],
            exclude: vec!["User:admin".into()],
        },
        ..Default::default()
    })
    .expect("compiles");
    assert!(sel.selects(AclResourceKind::Topic, "orders", "User:alice"));
    assert!(!sel.selects(AclResourceKind::Topic, "secret", "User:alice"));
    assert!(sel.selects(AclResourceKind::Group, "app-1", "User:alice"));
    assert!(!sel.selects(AclResourceKind::Group, "other", "User:alice"));
    assert!(!sel.selects(AclResourceKind::Topic, "orders", "User:admin"));
}
