//! Where an un-mirrored tail starts: after the last source offset the destination holds.
//!
//! The failover report names it from the agent's offset map at completion. That map can fall
//! short of what the destination holds: an instance that drove the failover without running
//! the agent takes the maps the owner last published on the state topic, and those are matched
//! to the destination's tail only when the source answers — after an unplanned failover it does
//! not (finding R2: the recovery then copied into the quarantine topic records the destination
//! already had). The recovery runs once the old source is back, so it matches here what the
//! report could not: the agent copies batches as they are, so the destination's last data
//! batch before the barrier (`last_mirrored_offset`) is the source's batch at the map's shift
//! (destination offset − source offset), with the same CRC (which covers neither the base
//! offset nor the leader epoch). When the two batches agree, the tail starts after that
//! source batch; when they do not, at the report's offset, and the listing says so.
//!
//! Owns: that match. Must not touch: the tail's contents (`tail`, `copy`), the report.

use crate::mirror::report::PartitionReport;
use crate::protocol::batch::{BatchHeader, BatchWalker};

use super::{RecoveryError, RecoveryIo};

/// The last source offset the destination holds of the report's partition `p`, and a warning
/// for the listing when it differs from the report's or could not be confirmed.
pub async fn last_mirrored<I: RecoveryIo>(
    io: &I,
    p: &PartitionReport,
) -> Result<(Option<i64>, Option<String>), RecoveryError> {
    let (Some(src), Some(dst)) = (
        p.last_mirrored_source_offset,
        p.last_mirrored_destination_offset,
    ) else {
        return Ok((p.last_mirrored_source_offset, None));
    };
    let Some(log_last) = p.last_mirrored_offset.filter(|l| *l > dst) else {
        return Ok((Some(src), None));
    };
    let shift = dst - src;
    let on_destination = batch_at(io, p, log_last, false).await?;
    let on_source = batch_at(io, p, log_last - shift, true).await?;
    let agree = match (on_destination, on_source) {
        (Some(d), Some(s)) => {
            d.crc == s.crc
                && d.base_offset - shift == s.base_offset
                && d.last_offset() - shift == s.last_offset()
        }
        _ => false,
    };
    let at = format!("{}-{}", p.topic, p.partition);
    if agree {
        let last = log_last - shift;
        Ok((
            Some(last),
            Some(format!(
                "{at}: the destination holds source offsets up to {last}, beyond the report's {src} (the agent's offset map was published before its last copies and not matched at completion); the tail starts after them"
            )),
        ))
    } else {
        Ok((
            Some(src),
            Some(format!(
                "{at}: the destination's data reaches offset {log_last}, beyond the report's {dst}, but its batch there is not the source's at offset {}: the tail starts after the report's source offset {src} and may hold records the destination has",
                log_last - shift
            )),
        ))
    }
}

/// The header of the batch holding `offset` in the source's (`source`) or the destination's
/// partition of `p`; `None` when no batch holds it.
async fn batch_at<I: RecoveryIo>(
    io: &I,
    p: &PartitionReport,
    offset: i64,
    source: bool,
) -> Result<Option<BatchHeader>, RecoveryError> {
    let data = if source {
        io.source_batches(&p.topic, p.partition, offset).await?
    } else {
        io.destination_batches(&p.topic, p.partition, offset)
            .await?
    };
    for item in BatchWalker::fetched(&data) {
        let (h, _) = item.map_err(|e| RecoveryError::Malformed {
            topic: p.topic.clone(),
            partition: p.partition,
            why: e.to_string(),
        })?;
        if h.base_offset > offset {
            return Ok(None);
        }
        if h.last_offset() >= offset {
            return Ok(Some(h));
        }
    }
    Ok(None)
}
