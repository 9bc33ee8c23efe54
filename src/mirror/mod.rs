//! Mirrors: the mirror controller, failover and the built-in mirror agent live here
//! (docs/architecture.md: the parts, the partition states, the barrier).
//!
//! Owns: [`controller`] — the running controller: partition states of every mirror, read-only
//! checks, fencing, the failover executor and PID screening; [`pid_allocator`] — the failover
//! step that advances the destination brokers' producer-id allocators past the screened ids; and [`state`] — the per-partition state machine of a mirror (MIRRORING, PAUSED,
//! STOPPING, STOPPED, FAILED), the per-partition failover progress that lets a restarted gateway
//! resume a failover from its last persisted step, and the versioned JSON persistence format of
//! both. The state machine is pure data and rules: it performs no I/O, talks to no broker and
//! knows nothing about networking; the controller (later) drives it, writes barriers
//! (`protocol::barrier`) and saves records through the state store (`state`).
//!
//! Must not touch: sockets, the state store's file layout, the PSM's contents.

pub mod agent;
pub mod barrier_check;
pub mod controller;
pub mod permissions;
pub mod pid_allocator;
pub mod state;

pub use state::{
    FailoverStep, MirrorRecord, PartitionRecord, PartitionState, StateDecodeError, StepError,
    TransitionError,
};
