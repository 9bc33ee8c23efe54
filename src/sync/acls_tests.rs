//! ACL sync policy against a fake pair of clusters.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::*;
use crate::config::{AclSyncConfig, PrincipalFilterConfig};

fn topic_acl(name: &str, pattern: i8, principal: &str) -> AclBinding {
    AclBinding {
        resource_type: RESOURCE_TOPIC,
        resource_name: name.into(),
        pattern_type: pattern,
        principal: principal.into(),
        host: "*".into(),
        operation: 3,       // READ
        permission_type: 3, // ALLOW
    }
}

fn group_acl(name: &str, principal: &str) -> AclBinding {
    AclBinding {
        resource_type: RESOURCE_GROUP,
        ..topic_acl(name, PATTERN_LITERAL, principal)
    }
}

#[derive(Default)]
struct Fake {
    source: Mutex<Vec<AclBinding>>,
    destination: Mutex<BTreeSet<AclBinding>>,
    stopped: AtomicBool,
    writes: Mutex<usize>,
}

impl Fake {
    fn with(source: Vec<AclBinding>, destination: Vec<AclBinding>) -> Fake {
        Fake {
            source: Mutex::new(source),
            destination: Mutex::new(destination.into_iter().collect()),
            ..Fake::default()
        }
    }
    fn dest(&self) -> BTreeSet<AclBinding> {
        self.destination.lock().unwrap().clone()
    }
}

impl AclIo for Fake {
    fn topics(&self) -> Vec<String> {
        vec!["orders".into()]
    }
    fn may_write(&self) -> bool {
        !self.stopped.load(Ordering::SeqCst)
    }
    async fn source_acls(&self) -> Result<Vec<AclBinding>, String> {
        Ok(self.source.lock().unwrap().clone())
    }
    async fn destination_acls(&self) -> Result<Vec<AclBinding>, String> {
        Ok(self.dest().into_iter().collect())
    }
    async fn create(&self, acls: &[AclBinding]) -> Result<Vec<Result<(), String>>, String> {
        *self.writes.lock().unwrap() += 1;
        let mut d = self.destination.lock().unwrap();
        Ok(acls
            .iter()
            .map(|b| {
                d.insert(b.clone());
                Ok(())
            })
            .collect())
    }
    async fn delete(&self, acls: &[AclBinding]) -> Result<Vec<Result<(), String>>, String> {
        *self.writes.lock().unwrap() += 1;
        let mut d = self.destination.lock().unwrap();
        Ok(acls
            .iter()
            .map(|b| {
                d.remove(b);
                Ok(())
            })
            .collect())
    }
}

fn sync_with(cfg: AclSyncConfig) -> AclSync {
    AclSync::new(AclSelector::compile(&cfg).expect("selector"))
}

fn sync() -> AclSync {
    sync_with(AclSyncConfig::default())
}

#[tokio::test]
async fn a_literal_acl_of_a_mirror_topic_is_created() {
    let b = topic_acl("orders", PATTERN_LITERAL, "User:alice");
    let io = Fake::with(vec![b.clone()], vec![]);
    sync().round(&io).await.expect("round");
    assert!(io.dest().contains(&b));
}

#[tokio::test]
async fn a_prefixed_acl_covering_a_mirror_topic_is_created() {
    let b = topic_acl("ord", PATTERN_PREFIXED, "User:alice");
    let io = Fake::with(vec![b.clone()], vec![]);
    sync().round(&io).await.expect("round");
    assert!(io.dest().contains(&b));
}

#[tokio::test]
async fn an_acl_of_a_topic_outside_the_mirror_is_not_created() {
    let io = Fake::with(
        vec![topic_acl("payments", PATTERN_LITERAL, "User:alice")],
        vec![],
    );
    sync().round(&io).await.expect("round");
    assert!(io.dest().is_empty());
}

#[tokio::test]
async fn group_acls_are_created() {
    let b = group_acl("app", "User:alice");
    let io = Fake::with(vec![b.clone()], vec![]);
    sync().round(&io).await.expect("round");
    assert!(io.dest().contains(&b));
}

#[tokio::test]
async fn an_excluded_principal_is_not_copied() {
    let io = Fake::with(
        vec![topic_acl("orders", PATTERN_LITERAL, "User:admin")],
        vec![],
    );
    let mut s = sync_with(AclSyncConfig {
        principals: PrincipalFilterConfig {
            include: vec![],
            exclude: vec!["User:admin".into()],
        },
        ..AclSyncConfig::default()
    });
    s.round(&io).await.expect("round");
    assert!(io.dest().is_empty());
}

#[tokio::test]
async fn an_acl_present_on_the_destination_is_not_created_again() {
    let b = topic_acl("orders", PATTERN_LITERAL, "User:alice");
    let io = Fake::with(vec![b.clone()], vec![b]);
    sync().round(&io).await.expect("round");
    assert_eq!(*io.writes.lock().unwrap(), 0);
}

#[tokio::test]
async fn a_destination_acl_it_did_not_create_is_never_deleted() {
    let theirs = topic_acl("orders", PATTERN_LITERAL, "User:bob");
    let io = Fake::with(vec![], vec![theirs.clone()]);
    sync().round(&io).await.expect("round");
    assert!(io.dest().contains(&theirs));
}

#[tokio::test]
async fn an_acl_it_created_and_the_source_removed_is_deleted() {
    let b = topic_acl("orders", PATTERN_LITERAL, "User:alice");
    let io = Fake::with(vec![b.clone()], vec![]);
    let mut s = sync();
    s.round(&io).await.expect("round");
    io.source.lock().unwrap().clear();
    let r = s.round(&io).await.expect("round");
    assert!(!io.dest().contains(&b));
    assert_eq!(r.deleted, 1);
}

#[tokio::test]
async fn an_acl_it_created_and_someone_deleted_on_the_destination_is_not_recreated() {
    let b = topic_acl("orders", PATTERN_LITERAL, "User:alice");
    let io = Fake::with(vec![b.clone()], vec![]);
    let mut s = sync();
    s.round(&io).await.expect("round");
    io.destination.lock().unwrap().clear();
    let r = s.round(&io).await.expect("round");
    assert!(io.dest().is_empty());
    assert_eq!(r.removed_on_destination, vec![b]);
}

#[tokio::test]
async fn nothing_is_written_once_sync_is_stopped() {
    let io = Fake::with(
        vec![topic_acl("orders", PATTERN_LITERAL, "User:alice")],
        vec![],
    );
    io.stopped.store(true, Ordering::SeqCst);
    sync().round(&io).await.expect("round");
    assert_eq!(*io.writes.lock().unwrap(), 0);
}
