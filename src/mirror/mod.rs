//! Mirrors: the mirror controller, failover and the built-in mirror agent live here
//! (docs/architecture.md: the parts, the partition states, the barrier).
//!
//! Owns: [`controller`] — the one mirror type the rest of the gateway holds, wiring the parts
//! below and answering the admin calls; [`admission`] — the read-only and fencing decisions on
//! the produce path and the mirror writes in flight; [`records`] — the mirror records and their
//! persistence (memory never ahead of disk); [`screening`] — the PID screening set;
//! [`failover`] — the failover step executor over the [`failover::FailoverIo`] seam, whose real
//! implementation is [`barrier_io`] (barrier writes, the barrier's producer id, PSM clearing);
//! [`policy`] — [`policy::MirrorPolicy`], the one mirror interface the proxy holds (the controller implements it); [`fault_hooks`] — the fault-injection hooks, read once at start; [`mirror_metrics`] — the
//! metrics; [`pid_allocator`] — the failover step that advances the destination brokers'
//! producer-id allocators past the screened ids; [`barrier_check`] — the start-up check of
//! recorded barriers against the logs; [`own_barrier`] — how a failover recognises its own
//! barriers in a log; [`offset_map`] — the agent's exact source → destination offset map (the
//! agent writes it; the group sync, the admin API and the report read it); [`wire`] — the
//! requests the agent and the group sync send to the clusters; [`permissions`]; [`agent`] — the built-in mirror agent;
//! [`sync`] — the agent's topic config and ACL sync (stopped by the failover);
//! [`groups`] — the consumer group offset sync of the agent's mirrors; [`peers`] — several
//! instances: heartbeats, leases and failover fences through the state topic;
//! and [`state`] — the per-partition state machine of a mirror (MIRRORING, PAUSED, STOPPING,
//! STOPPED, FAILED), the per-partition failover progress that lets a restarted gateway resume a
//! failover from its last persisted step, and the versioned JSON persistence format of both.
//! The state machine is pure data and rules: it performs no I/O, talks to no broker and knows
//! nothing about networking.
//!
//! Must not touch: sockets, the state store's file layout, the PSM's contents.

pub mod admission;
pub mod fault_hooks;
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
