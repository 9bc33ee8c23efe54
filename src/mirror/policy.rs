//! The mirrors as a client connection sees them: [`MirrorPolicy`], the one mirror interface the
//! proxy holds. A connection asks it whether a topic is mirrored, whether a write may pass (and
//! holds the in-flight guard it gets), which admin requests to refuse, whether an
//! InitProducerId answer must be screened, and tells it what it saw (barriers, refusals,
//! duplicate acknowledgements) for the metrics.
//!
//! Owns: that interface. Its implementation is the controller's (`controller/policy.rs`: each
//! method delegates to the controller's admission, screening set or metrics); this module names
//! no controller, so the mirror's state of record stays below everything that drives it. Must
//! not touch: the decisions themselves (`admission.rs`, `screening.rs`), failover, persistence.
//!
//! The proxy's tests can give a connection a fake policy; the real one is the controller.

use crate::metrics::ListenerKind;

use super::admission::{InFlightGuard, Refusal};
use super::screening::{Collision, ScreenEntry};

/// What the proxy asks of the mirrors (see the module doc).
pub trait MirrorPolicy: Send + Sync {
    /// Whether `topic` belongs to a configured mirror.
    fn is_mirror_topic(&self, topic: &str) -> bool;
    /// May a Produce on `listener` write `topic`/`partition`? `Ok(Some(guard))` for a mirror
    /// write, which counts as in flight until the guard is answered or dropped.
    fn admit(
        &self,
        listener: ListenerKind,
        topic: &str,
        partition: i32,
    ) -> Result<Option<InFlightGuard>, Refusal>;
    /// Asked again right before a request holding admitted mirror writes is sent to the broker:
    /// why it may no longer be (`None`: it may). Between the admission and the send a paused
    /// or cut-off instance can lose its lease, and the other instances write their barriers.
    fn admitted_mirror_writes_lapsed(&self) -> Option<String>;
    /// How long a request holding admitted mirror writes may still take to be written to the
    /// broker (several instances: what is left of the lease; review G1). `None`: no bound.
    fn mirror_send_deadline(&self) -> Option<std::time::Duration> {
        None
    }
    /// The partition's failover barrier offset, once one is recorded.
    fn barrier_offset(&self, topic: &str, partition: i32) -> Option<i64>;
    /// The refusal of admin, transaction or group request `op` on `listener` naming `topic`
    /// (and `partition`).
    fn refuse_admin(
        &self,
        listener: ListenerKind,
        op: &str,
        topic: &str,
        partition: Option<i32>,
    ) -> Option<Refusal>;
    /// The refusal of `op` on `listener` when it names no topic but acts on every partition.
    fn refuse_admin_everywhere(&self, listener: ListenerKind, op: &str) -> Option<Refusal>;
    /// Whether InitProducerId answers are screened (the screening set is not empty).
    fn screening_active(&self) -> bool;
    /// The screening entry of `producer_id`, if it is screened.
    fn screened(&self, producer_id: i64) -> Option<ScreenEntry>;
    /// How a local write with this id (a data batch at `epoch`; `None`: a partition added to a
    /// transaction) of a transaction of `transactional_id`, if any, would collide with a
    /// screened producer.
    fn mirrored_producer_collision(
        &self,
        producer_id: i64,
        epoch: Option<i16>,
        transactional_id: Option<&str>,
    ) -> Option<Collision>;
    /// An InitProducerId answer was screened.
    fn count_screened(&self);
    /// An `acks=0` Produce was refused.
    fn count_acks_zero_refused(&self);
    /// The duplicate-acknowledgement guard changed an answer.
    fn count_duplicate_ack(&self);
    /// `n` barrier batches of `topic` seen, by `kind` ("mirrored", "hidden").
    fn count_barriers_seen(&self, topic: &str, kind: &str, n: u64);
}
