//! Switches of the simulation's positive controls that live in the view (test builds only):
//! the behaviour before a fix, per thread (the simulation runs one seed per thread).
//!
//! Owns: those switches. Must not touch: anything outside test builds.

use std::cell::Cell;

thread_local! {
    static WALL_CLOCK_LIVENESS: Cell<bool> = const { Cell::new(false) };
    static HEARTBEAT_UNREAD: Cell<bool> = const { Cell::new(false) };
    static OWNERSHIP_ACROSS_LAPSES: Cell<bool> = const { Cell::new(false) };
    static TWIN_IGNORED: Cell<bool> = const { Cell::new(false) };
    static BROKER_CLOCK_IGNORED: Cell<bool> = const { Cell::new(false) };
}

/// Before G13: a heartbeat's broker append time is not compared with the local clock, so a
/// process stopped with its clock (a VM) resumes holding its lease.
pub fn set_broker_clock_ignored(on: bool) {
    BROKER_CLOCK_IGNORED.with(|c| c.set(on));
}

pub(super) fn broker_clock_ignored() -> bool {
    BROKER_CLOCK_IGNORED.with(Cell::get)
}

/// Before G12: a heartbeat of this instance's id written by another process is ignored.
pub fn set_twin_ignored(on: bool) {
    TWIN_IGNORED.with(|c| c.set(on));
}

pub(super) fn twin_ignored() -> bool {
    TWIN_IGNORED.with(Cell::get)
}

/// Before S3: the agent's owner keeps its epoch across a lapse of its lease.
pub fn set_ownership_across_lapses(on: bool) {
    OWNERSHIP_ACROSS_LAPSES.with(|c| c.set(on));
}

pub(super) fn ownership_across_lapses() -> bool {
    OWNERSHIP_ACROSS_LAPSES.with(Cell::get)
}

/// Before G10: an instance heartbeats whether or not it has read the state topic lately.
pub fn set_heartbeat_unread(on: bool) {
    HEARTBEAT_UNREAD.with(|c| c.set(on));
}

pub(super) fn heartbeat_unread() -> bool {
    HEARTBEAT_UNREAD.with(Cell::get)
}

/// Before G5: a heartbeat whose writer's clock is more than ten sessions behind the
/// reader's is dropped.
pub fn set_wall_clock_liveness(on: bool) {
    WALL_CLOCK_LIVENESS.with(|c| c.set(on));
}

/// Whether the switch of G5 drops a heartbeat written at `at_ms` (the writer's clock) and read
/// at `now_ms` (the reader's).
pub(super) fn drops_heartbeat(now_ms: i64, at_ms: i64, session: std::time::Duration) -> bool {
    WALL_CLOCK_LIVENESS.with(Cell::get) && now_ms - at_ms > 10 * session.as_millis() as i64
}
