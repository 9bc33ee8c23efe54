//! The admission's decisions for admin, transaction and group requests naming a mirror topic:
//! on the client listener refused until the topic is STOPPED (review F5), on the mirror listener
//! refused once its failover has begun (review G8).
//!
//! Owns: those two rules and their messages. Must not touch: the lookup snapshot's contents
//! (the parent module refreshes it), produce admission, the in-flight counts.

use crate::metrics::ListenerKind;

use super::super::peer_gate::PeerRefusal;
use super::super::state::PartitionState;
use super::{Admission, Refusal, REJECT_ERROR_CODE, RETRY_LATER_ERROR_CODE};

/// Why a change to a failed-over topic is refused on the mirror listener.
const FAILED_OVER: &str = "a failed-over topic takes changes from local clients only";

impl Admission {
    /// The decision for an admin, transaction or group request `op` (e.g. `DeleteRecords`) on
    /// `listener` naming `topic` — one partition, or the whole topic when `partition` is `None`.
    /// `None`: not a mirror topic, or allowed.
    ///
    /// - Client listener: refused (POLICY_VIOLATION) while the partition, or any partition of
    ///   the topic, is not STOPPED; counted as `rejected{reason="read_only_admin"}`.
    /// - Mirror listener: refused once the topic is failed over ([`Self::refuse_mirror_admin`]);
    ///   counted as `rejected{reason="mirror_fenced_admin"}`.
    ///
    /// A mirror whose state cannot be read refuses on both (`state_unreadable`).
    pub fn refuse_admin(
        &self,
        listener: ListenerKind,
        op: &str,
        topic: &str,
        partition: Option<i32>,
    ) -> Option<Refusal> {
        let idx = self.router.mirror_index(topic)?;
        let mirror = self.mirror_name(idx);
        let what = match partition {
            Some(p) => format!("{topic}-{p}"),
            None => format!("topic {topic}"),
        };
        if let Some(r) =
            self.refuse_unreadable(idx, &format!("{op} on {what} is refused: it belongs to"))
        {
            return Some(r);
        }
        if listener == ListenerKind::Mirror {
            return self.refuse_mirror_admin(idx, op, topic, partition, &what);
        }
        let state = match partition {
            Some(p) => self.state_of(topic, p).unwrap_or(PartitionState::Mirroring),
            None => self.topic_state(topic),
        };
        if state == PartitionState::Stopped {
            return None;
        }
        self.rejected.with_label_values(&["read_only_admin"]).inc();
        Some(Refusal {
            error_code: REJECT_ERROR_CODE,
            message: format!(
                "mirrorgate: {op} on {what} is refused: it belongs to mirror {mirror}, which is {}; mirror topics are read-only on the client listener until failover",
                state.as_str()
            ),
            reason: "read_only_admin",
        })
    }

    /// Review G8: on the mirror listener a change to a failed-over topic is refused as a mirror
    /// produce to it is, and for the same reasons: a failover has begun for the partition (or
    /// for any partition of the topic): STOPPING, STOPPED, or FAILED by a failover step; the
    /// mirror's failover is recorded here (a partition without a record counts as STOPPING);
    /// or, with several instances, the state topic announces a failover of the mirror through
    /// any instance (POLICY_VIOLATION), or this instance holds no lease to know it does not
    /// (NOT_ENOUGH_REPLICAS, retriable). While the mirror is MIRRORING or PAUSED the mirroring
    /// tool keeps them: it creates partitions, syncs configs and checkpoints group offsets.
    fn refuse_mirror_admin(
        &self,
        idx: usize,
        op: &str,
        topic: &str,
        partition: Option<i32>,
        what: &str,
    ) -> Option<Refusal> {
        use PartitionState::{Failed, Stopped, Stopping};
        let mirror = self.mirror_name(idx);
        let failed_over = |s: &PartitionState| matches!(s, Stopping | Stopped | Failed);
        let recorded = match partition {
            Some(p) => self.recorded_state(topic, p).filter(failed_over),
            None => {
                let states = self.read().states.get(topic).cloned().unwrap_or_default();
                states.into_iter().flatten().find(failed_over)
            }
        };
        let state = recorded.or_else(|| self.failover_started(idx).then_some(Stopping));
        let (error_code, why) = match state {
            Some(state) => {
                let by = self.failed_over_through(mirror);
                (
                    REJECT_ERROR_CODE,
                    format!("mirror {mirror} is {}{by}; {FAILED_OVER}", state.as_str()),
                )
            }
            None => match self.peers.get().and_then(|p| p.failover_refusal(mirror))? {
                PeerRefusal::NoLease(m) => (RETRY_LATER_ERROR_CODE, m),
                PeerRefusal::FailedOver(m) => (REJECT_ERROR_CODE, format!("{m}; {FAILED_OVER}")),
            },
        };
        self.rejected
            .with_label_values(&["mirror_fenced_admin"])
            .inc();
        Some(Refusal {
            error_code,
            message: format!(
                "mirrorgate: {op} on {what} through the mirror listener is fenced: {why}"
            ),
            reason: "mirror_fenced_admin",
        })
    }

    /// [`Self::refuse_admin`] for a request on every partition of the cluster: refused when any
    /// mirror topic would be (client listener: any not STOPPED in full; mirror listener: any
    /// failed over).
    pub fn refuse_admin_everywhere(&self, listener: ListenerKind, op: &str) -> Option<Refusal> {
        let mut topics = self.cluster.topic_names();
        topics.extend(self.read().states.keys().cloned());
        topics.sort();
        topics.dedup();
        topics
            .iter()
            .find_map(|t| self.refuse_admin(listener, op, t, None))
    }

    /// The state of a whole topic for admin requests: STOPPED only when every partition known
    /// (in the cluster's metadata or in the records) is; otherwise the state of the first
    /// partition that is not (a partition without a record counts as MIRRORING, as does a topic
    /// without any known partition).
    fn topic_state(&self, topic: &str) -> PartitionState {
        let in_cluster = self
            .cluster
            .topic(topic)
            .map(|t| t.leaders.len())
            .unwrap_or(0);
        let recorded = self.read().states.get(topic).map(Vec::len).unwrap_or(0);
        let n = in_cluster.max(recorded);
        if n == 0 {
            return PartitionState::Mirroring;
        }
        (0..n as i32)
            .map(|p| self.state_of(topic, p).unwrap_or(PartitionState::Mirroring))
            .find(|s| *s != PartitionState::Stopped)
            .unwrap_or(PartitionState::Stopped)
    }
}
