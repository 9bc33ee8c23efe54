//! The checker's rule for the application's consumer group: every record of the destination's
//! log was read on one side or the other; one read by neither is *skipped* when the group read
//! past it on the destination, *unread* when it never got that far; records read twice are
//! counted (`reread`), not a breach.
//!
//! Owns: that rule. Must not touch: the other rules (`check.rs`).

use std::collections::HashMap;

use super::{Entry, GroupReads, Verdict};

/// Groups never skip (see the module's rules).
pub(super) fn check(v: &mut Verdict, destination: &[Vec<Entry>], g: GroupReads) {
    let mut times: HashMap<&str, usize> = HashMap::new();
    for r in g.source.iter().chain(g.destination) {
        *times.entry(r.key.as_str()).or_default() += 1;
    }
    // How far the group read each partition on the destination.
    let mut reached: HashMap<i32, i64> = HashMap::new();
    for r in g.destination {
        let e = reached.entry(r.partition).or_insert(r.offset);
        *e = (*e).max(r.offset);
    }
    let (mut skipped, mut unread) = (0, 0);
    for (p, log) in destination.iter().enumerate() {
        let past = reached.get(&(p as i32)).copied();
        let (mut first_skipped, mut skipped_here) = (None, 0);
        let mut first_unread = None;
        for e in log {
            let Entry::Data { offset, key, .. } = e else {
                continue;
            };
            if times.contains_key(key.as_str()) {
                continue;
            }
            if past.is_some_and(|r| r > *offset) {
                skipped_here += 1;
                first_skipped.get_or_insert((key.as_str(), *offset));
            } else {
                unread += 1;
                first_unread.get_or_insert(*offset);
            }
        }
        skipped += skipped_here;
        if let Some((key, offset)) = first_skipped {
            v.breach(format!(
                "partition {p}: the group skipped {skipped_here} records, the first {key} at {offset}: read on neither side, while it read up to {} on the destination",
                past.unwrap_or_default()
            ));
        }
        if let Some(o) = first_unread {
            v.breach(format!(
                "partition {p}: the group never read the destination from offset {o} on (it read up to {past:?})"
            ));
        }
    }
    v.skipped = Some(skipped);
    v.unread = Some(unread);
    v.reread = Some(times.values().map(|n| n - 1).sum());
}
