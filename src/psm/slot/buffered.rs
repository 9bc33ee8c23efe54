//! What a partition that is not rebuilt keeps of the appends answered meanwhile (batches, and
//! the transaction markers the mirror agent reports), and their installation on a rebuilt state
//! in offset order.
//!
//! Owns: the buffered items and [`apply_buffered`]. Must not touch: the phases (`slot.rs`).

use crate::protocol::batch::BatchHeader;

use super::super::{Marker, PartitionPsm};

/// A transaction marker appended to the partition by WriteTxnMarkers (the mirror agent's copy of
/// a source marker), as the PSM applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendedMarker {
    pub producer_id: i64,
    pub epoch: i16,
    pub marker: Marker,
    pub coordinator_epoch: i32,
    /// The broker's append time of the marker (milliseconds).
    pub timestamp: i64,
}

/// What was appended at an offset while the partition was not rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    Batch(BatchHeader),
    Marker(AppendedMarker),
}

/// (first offset, what) of the appends answered while the partition was not rebuilt.
pub(super) type Buffered = Vec<(i64, Appended)>;

/// Install the outcomes that arrived while a partition was being rebuilt (first offset, batch)
/// onto the rebuilt `psm`, in offset order (they were answered on several connections, in any
/// order), skipping those the rebuild read from the log already (at or below `read_through`).
/// Returns the highest offset the state reflects.
pub fn apply_buffered(
    psm: &mut PartitionPsm,
    mut buffered: Vec<(i64, Appended)>,
    read_through: i64,
) -> i64 {
    buffered.sort_by_key(|(offset, _)| *offset);
    let mut through = read_through;
    for (offset, appended) in buffered {
        if offset > through {
            match appended {
                Appended::Batch(header) => {
                    let _ = psm.replay(&header, offset);
                    through = offset + i64::from(header.last_offset_delta);
                }
                Appended::Marker(m) => {
                    psm.replay_control(
                        m.producer_id,
                        m.epoch,
                        m.marker,
                        m.coordinator_epoch,
                        offset,
                        m.timestamp,
                    );
                    through = offset;
                }
            }
        }
    }
    through
}
