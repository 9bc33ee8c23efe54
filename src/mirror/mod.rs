//! A mirror's state of record and the decisions a client connection asks of it — the bottom of
//! the mirror stack (docs/architecture.md: the parts, the partition states, the barrier). What
//! drives a mirror sits above this module and is named by none of it: the other instances
//! (`instances`), the failover (`failover`), the controller that wires them (`controller`), the
//! syncs (`sync`) and the built-in agent (`agent`).
//!
//! Owns: [`state`] — the per-partition state machine of a mirror (MIRRORING, PAUSED, STOPPING,
//! STOPPED, FAILED), the per-partition failover progress that lets a restarted gateway resume a
//! failover from its last persisted step, and the versioned JSON persistence format of both
//! (pure data and rules: no I/O, no broker, no networking); [`records`] — the mirror records
//! and their persistence (memory never ahead of disk); [`admission`] — the read-only and
//! fencing decisions on the produce path and the mirror writes in flight; [`peer_gate`] — what
//! the admission asks of the other instances (a trait they implement); [`policy`] —
//! [`policy::MirrorPolicy`], the one mirror interface the proxy holds (the controller
//! implements it); [`screening`] — the PID screening set; [`report`] — the failover report's
//! shape and figures; [`forwarded_acks`] — the acknowledgements a forward listener passed, kept
//! until mirrored, for the report's per-producer loss; [`offset_map`] — the agent's exact source → destination offset map (the
//! agent writes it; the group sync, the admin API and the report read it); [`own_barrier`] —
//! how a failover recognises its own barriers in a log; [`permissions`] — the authorisation
//! failures the gateway's own requests met; [`fault_hooks`] — the fault-injection hooks, read
//! once at start; [`mirror_metrics`] — the metrics.
//!
//! Must not touch: sockets, brokers, the state store's file layout, the PSM's contents, and
//! every module above it (the architecture test's layers).

pub mod admission;
pub mod fault_hooks;
pub mod forwarded_acks;
pub mod mirror_metrics;
pub mod offset_map;
pub mod own_barrier;
pub mod peer_gate;
pub mod permissions;
pub mod policy;
pub mod records;
pub mod report;
pub mod screening;
pub mod state;

pub use state::{
    FailoverStep, MirrorRecord, PartitionRecord, PartitionState, StateDecodeError, StepError,
    TransitionError,
};
