//! ACL sync policy (opt-in, `mirrors[].acls`): the source's ACLs on the mirror's topics and on
//! consumer groups are created on the destination when missing, so that clients the source
//! allowed are allowed after a failover.
//!
//! - Topic ACLs: LITERAL ones naming a mirror topic (or Kafka's `*`), PREFIXED ones whose prefix
//!   starts a mirror topic (copied whole: on the destination they cover the same names).
//! - Group ACLs: every LITERAL or PREFIXED group ACL of the source (group names are not tied to
//!   the mirror's topics), filtered like topic ACLs by `acls.include` / `exclude` / `principals`.
//! - Deletion: only ACLs this gateway created (remembered in memory since it started) and that
//!   are gone from the source are deleted; an ACL created here and then deleted on the destination
//!   by someone else is not created again (reported). Nothing else on the destination is ever
//!   deleted.
//!
//! Owns: the selection, the create/delete plan, the memory of what was created.
//! Must not touch: the requests (the [`AclIo`] implementation does), partition states.

use std::collections::BTreeSet;
use std::future::Future;

use serde::Serialize;

use crate::config::{AclResourceKind, AclSelector};

/// Kafka's resource types (ResourceType) and pattern types (PatternType).
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_GROUP: i8 = 3;
pub const PATTERN_LITERAL: i8 = 3;
pub const PATTERN_PREFIXED: i8 = 4;

/// One ACL binding, as DescribeAcls answers and CreateAcls takes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

impl AclBinding {
    fn kind(&self) -> Option<AclResourceKind> {
        match self.resource_type {
            RESOURCE_TOPIC => Some(AclResourceKind::Topic),
            RESOURCE_GROUP => Some(AclResourceKind::Group),
            _ => None,
        }
    }

    /// Whether this (topic) binding applies to `topic`.
    fn covers(&self, topic: &str) -> bool {
        match self.pattern_type {
            PATTERN_LITERAL => self.resource_name == topic || self.resource_name == "*",
            PATTERN_PREFIXED => topic.starts_with(&self.resource_name),
            _ => false,
        }
    }
}

/// The I/O of ACL sync (real: `sync::wire`; tests: a fake).
pub trait AclIo: Send + Sync {
    /// The mirror's topics.
    fn topics(&self) -> Vec<String>;
    /// Whether the destination may be written now: no failover started, sync not stopped.
    fn may_write(&self) -> bool;
    /// The source's TOPIC and GROUP ACLs.
    fn source_acls(&self) -> impl Future<Output = Result<Vec<AclBinding>, String>> + Send;
    /// The destination's TOPIC and GROUP ACLs.
    fn destination_acls(&self) -> impl Future<Output = Result<Vec<AclBinding>, String>> + Send;
    /// Create bindings; one result per binding.
    fn create(
        &self,
        acls: &[AclBinding],
    ) -> impl Future<Output = Result<Vec<Result<(), String>>, String>> + Send;
    /// Delete exactly these bindings; one result per binding.
    fn delete(
        &self,
        acls: &[AclBinding],
    ) -> impl Future<Output = Result<Vec<Result<(), String>>, String>> + Send;
}

/// What a round decided before writing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Source bindings selected for the destination.
    pub wanted: BTreeSet<AclBinding>,
    pub create: Vec<AclBinding>,
    pub delete: Vec<AclBinding>,
    /// Bindings this gateway created that someone deleted on the destination: not re-created.
    pub removed_on_destination: Vec<AclBinding>,
}

/// The selected source bindings for `topics`.
pub fn select(sel: &AclSelector, topics: &[String], source: &[AclBinding]) -> BTreeSet<AclBinding> {
    source
        .iter()
        .filter(|b| matches!(b.pattern_type, PATTERN_LITERAL | PATTERN_PREFIXED))
        .filter(|b| match b.kind() {
            Some(AclResourceKind::Topic) => {
                topics.iter().any(|t| b.covers(t))
                    && sel.selects(AclResourceKind::Topic, &b.resource_name, &b.principal)
            }
            Some(AclResourceKind::Group) => {
                sel.selects(AclResourceKind::Group, &b.resource_name, &b.principal)
            }
            None => false,
        })
        .cloned()
        .collect()
}

/// Create what is wanted and missing (unless this gateway created it before and someone
/// removed it); delete what this gateway created that is no longer wanted.
pub fn plan(
    wanted: BTreeSet<AclBinding>,
    destination: &[AclBinding],
    created: &BTreeSet<AclBinding>,
) -> Plan {
    let dest: BTreeSet<&AclBinding> = destination.iter().collect();
    let mut p = Plan::default();
    for b in &wanted {
        if dest.contains(b) {
            continue;
        }
        if created.contains(b) {
            p.removed_on_destination.push(b.clone());
        } else {
            p.create.push(b.clone());
        }
    }
    p.delete = created
        .iter()
        .filter(|b| !wanted.contains(*b) && dest.contains(b))
        .cloned()
        .collect();
    p.wanted = wanted;
    p
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RoundReport {
    /// Source bindings selected.
    pub selected: usize,
    pub created: usize,
    pub deleted: usize,
    pub removed_on_destination: Vec<AclBinding>,
    pub errors: Vec<String>,
}

/// The policy's memory: what this gateway created (in memory, per gateway).
#[derive(Debug)]
pub struct AclSync {
    selector: AclSelector,
    created: BTreeSet<AclBinding>,
}

impl AclSync {
    pub fn new(selector: AclSelector) -> AclSync {
        AclSync {
            selector,
            created: BTreeSet::new(),
        }
    }

    /// Bindings this gateway created and that were not deleted since.
    pub fn created(&self) -> usize {
        self.created.len()
    }

    /// One round.
    pub async fn round<Io: AclIo>(&mut self, io: &Io) -> Result<RoundReport, String> {
        if !io.may_write() {
            return Ok(RoundReport::default());
        }
        let source = io.source_acls().await.map_err(|e| format!("source: {e}"))?;
        let destination = io
            .destination_acls()
            .await
            .map_err(|e| format!("destination: {e}"))?;
        let wanted = select(&self.selector, &io.topics(), &source);
        let p = plan(wanted, &destination, &self.created);
        let mut report = RoundReport {
            selected: p.wanted.len(),
            removed_on_destination: p.removed_on_destination.clone(),
            ..RoundReport::default()
        };
        if !p.create.is_empty() && io.may_write() {
            let results = io
                .create(&p.create)
                .await
                .map_err(|e| format!("create: {e}"))?;
            for (b, r) in p.create.iter().zip(results) {
                match r {
                    Ok(()) => {
                        report.created += 1;
                        self.created.insert(b.clone());
                    }
                    Err(e) => report.errors.push(format!("create {b:?}: {e}")),
                }
            }
        }
        if !p.delete.is_empty() && io.may_write() {
            let results = io
                .delete(&p.delete)
                .await
                .map_err(|e| format!("delete: {e}"))?;
            for (b, r) in p.delete.iter().zip(results) {
                match r {
                    Ok(()) => {
                        report.deleted += 1;
                        self.created.remove(b);
                    }
                    Err(e) => report.errors.push(format!("delete {b:?}: {e}")),
                }
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
#[path = "acls_tests.rs"]
mod tests;
