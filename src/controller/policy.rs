//! [`MirrorPolicy`] implemented by the controller: every method delegates to the controller's
//! admission, screening set or metrics.
//!
//! Owns: that delegation only. Must not touch: the decisions (`mirror::admission`,
//! `mirror::screening`), the interface's shape (`mirror::policy`).

use crate::metrics::ListenerKind;
use crate::mirror::admission::{InFlightGuard, Refusal};
use crate::mirror::policy::MirrorPolicy;
use crate::mirror::screening::{Collision, ScreenEntry};

use super::MirrorController;

impl MirrorPolicy for MirrorController {
    fn is_mirror_topic(&self, topic: &str) -> bool {
        MirrorController::is_mirror_topic(self, topic)
    }

    fn admit(
        &self,
        listener: ListenerKind,
        topic: &str,
        partition: i32,
    ) -> Result<Option<InFlightGuard>, Refusal> {
        MirrorController::admit(self, listener, topic, partition)
    }

    fn admitted_mirror_writes_lapsed(&self) -> Option<String> {
        MirrorController::admitted_mirror_writes_lapsed(self)
    }

    fn mirror_send_deadline(&self) -> Option<std::time::Duration> {
        MirrorController::mirror_send_deadline(self)
    }

    fn barrier_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        MirrorController::barrier_offset(self, topic, partition)
    }

    fn refuse_admin(
        &self,
        listener: ListenerKind,
        op: &str,
        topic: &str,
        partition: Option<i32>,
    ) -> Option<Refusal> {
        MirrorController::refuse_admin(self, listener, op, topic, partition)
    }

    fn refuse_admin_everywhere(&self, listener: ListenerKind, op: &str) -> Option<Refusal> {
        MirrorController::refuse_admin_everywhere(self, listener, op)
    }

    fn screening_active(&self) -> bool {
        MirrorController::screening_active(self)
    }

    fn screened(&self, producer_id: i64) -> Option<ScreenEntry> {
        MirrorController::screened(self, producer_id)
    }

    fn mirrored_producer_collision(
        &self,
        producer_id: i64,
        epoch: Option<i16>,
        transactional_id: Option<&str>,
    ) -> Option<Collision> {
        MirrorController::mirrored_producer_collision(self, producer_id, epoch, transactional_id)
    }

    fn count_screened(&self) {
        MirrorController::count_screened(self)
    }

    fn count_acks_zero_refused(&self) {
        MirrorController::count_acks_zero_refused(self)
    }

    fn count_duplicate_ack(&self) {
        MirrorController::count_duplicate_ack(self)
    }

    fn count_barriers_seen(&self, topic: &str, kind: &str, n: u64) {
        MirrorController::count_barriers_seen(self, topic, kind, n)
    }
}
