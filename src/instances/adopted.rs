//! The link's side of the adoption acknowledgements (review G4): each instance says on the
//! state topic once it has every partition of a mirror STOPPED for the failover announced now
//! (`adopted/<mirror>/<instance>`), and a failback asks which instances alive have not said so.
//!
//! Owns: those records' I/O. Must not touch: when an adoption is done (the controller), the
//! failback itself.

use std::time::Instant;

use super::view::PeerRecord;
use super::PeerLink;

impl PeerLink {
    /// Say that this instance has every partition of `mirror` STOPPED for failover `fid` (or
    /// has nothing of the mirror to stop); once per failover.
    pub async fn acknowledge_adopted(&self, mirror: &str, fid: &str) -> Result<(), String> {
        let me = self.me();
        if self.view().has_adopted(mirror, &me, fid) {
            return Ok(());
        }
        let at_ms = self.now_ms();
        self.log
            .append(&PeerRecord::Adopted {
                mirror: mirror.to_string(),
                failover_id: fid.to_string(),
                instance: me,
                at_ms,
            })
            .await
            .map_err(|e| {
                format!(
                    "cannot say on the state topic {} that failover {fid} is adopted here: {e}",
                    self.topic
                )
            })
    }

    /// The other instances alive now that have not said they have every partition of `mirror`
    /// STOPPED for failover `fid`: a failback waits for them.
    pub fn not_adopted(&self, mirror: &str, fid: &str) -> Vec<String> {
        self.view().not_adopted(mirror, fid, Instant::now())
    }

    /// The failover the state topic announces for `mirror` now, if any.
    pub fn announced(&self, mirror: &str) -> Option<String> {
        self.view().driver(mirror).map(|a| a.failover_id.clone())
    }
}
