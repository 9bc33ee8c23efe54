//! The schedule of one chaos run, drawn from its seed: how the failover happens (planned or with
//! the source killed), through which instance, the faults before, at and after it, the
//! operator's operations before it (a rolling restart, a pause of the mirror) and whether the
//! old source is failed back to afterwards, with the faults of that phase. The same
//! seed draws the same schedule; it is written next to the run's history (`schedule.json`) and
//! `--replay` reads it back instead of drawing it.
//!
//! Owns: the random choices of a run and their JSON form. Must not touch: processes, clusters,
//! the clock (the run carries the schedule out).

use serde::{Deserialize, Serialize};

/// Gateway instances of a run.
pub const INSTANCES: usize = 3;
/// The index of the failback gateway (in front of the old source), after the instances.
pub const FAILBACK: usize = INSTANCES;

/// A deterministic random source (SplitMix64): the same seed, the same draws.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// How the mirror fails over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The source producers stop, the agent catches up, then the failover: nothing may be lost.
    Planned,
    /// The source is killed (SIGKILL) under load, then the failover: what was not mirrored is
    /// the RPO, and the report must count it exactly.
    Unplanned,
}

/// One fault of the nemesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// SIGSTOP a gateway instance, SIGCONT it `ms` later (beyond its session timeout or not).
    PauseGateway { instance: usize, ms: u64 },
    /// SIGKILL a gateway instance, start it again `ms` later on its state directory.
    KillGateway { instance: usize, ms: u64 },
    /// Fill the disk of a gateway instance's state directory, free it `ms` later.
    FullDisk { instance: usize, ms: u64 },
    /// SIGKILL a destination broker that is not the controller (`node` 2 or 3), start it again
    /// `ms` later.
    KillBroker {
        #[serde(default = "second_broker")]
        node: u32,
        ms: u64,
    },
    /// Drop `loss_percent` % (100: all, a partition) of a gateway instance's packets to the
    /// brokers, for `ms` (`net.rs`).
    Network {
        instance: usize,
        loss_percent: u64,
        ms: u64,
    },
}

impl Fault {
    /// How long the fault lasts.
    pub fn ms(&self) -> u64 {
        match *self {
            Fault::PauseGateway { ms, .. }
            | Fault::KillGateway { ms, .. }
            | Fault::FullDisk { ms, .. }
            | Fault::KillBroker { ms, .. }
            | Fault::Network { ms, .. } => ms,
        }
    }
}

/// The broker a schedule written before brokers were drawn kills.
fn second_broker() -> u32 {
    2
}

/// What an operator does to the instances while the mirror runs (before the failover, beside
/// the faults, which may hit the same instances meanwhile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "operation", rename_all = "snake_case")]
pub enum Operation {
    /// Restart every instance in turn: SIGTERM, wait for it to end (SIGKILL after 30 s), start
    /// it again, wait until it is ready (60 s at most), `gap_ms`, the next.
    RollingRestart { at_ms: u64, gap_ms: u64 },
    /// Pause the mirror through instance `through` (`POST /v1/mirrors/{name}/pause`), resume
    /// it `ms` later through the next instance.
    PauseMirror { at_ms: u64, through: usize, ms: u64 },
}

impl Operation {
    pub fn at_ms(&self) -> u64 {
        match *self {
            Operation::RollingRestart { at_ms, .. } | Operation::PauseMirror { at_ms, .. } => at_ms,
        }
    }
}

/// A fault at `at_ms` after its phase began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timed {
    pub at_ms: u64,
    #[serde(flatten)]
    pub fault: Fault,
}

/// What happens to the instances while the failover runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "at_failover", rename_all = "snake_case")]
pub enum AtFailover {
    Nothing,
    /// Another instance is paused right before the call, for `ms`.
    PauseOther {
        instance: usize,
        ms: u64,
    },
    /// The driving instance is killed `after_ms` after the call and started again `ms` later:
    /// another instance takes the failover over (or the driver finished first).
    KillDriver {
        after_ms: u64,
        ms: u64,
    },
}

/// A run's schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub seed: u64,
    pub mode: Mode,
    /// The instance the failover is called through (after a dry run through it).
    pub driver: usize,
    /// Milliseconds of mirrored load before the failover.
    pub before_ms: u64,
    /// Milliseconds of local load after it.
    pub after_ms: u64,
    pub before: Vec<Timed>,
    pub at_failover: AtFailover,
    pub after: Vec<Timed>,
    /// The operator's operations before the failover, in time order (schedules written
    /// before operations existed have none).
    #[serde(default)]
    pub operations: Vec<Operation>,
    /// The failback after the failover, if the seed drew one (schedules written before
    /// failbacks existed have none).
    #[serde(default)]
    pub failback: Option<Failback>,
    /// Network faults before the failover, beside the other faults and operations (schedules
    /// written before they existed have none).
    #[serde(default)]
    pub network: Vec<Timed>,
}

/// A failback: once the failover is complete the old source is realigned (after an unplanned
/// failover) and a gateway in front of it mirrors the destination back for `ms` while the local
/// producers go on, under `faults` (of the failback gateway and the destination's brokers, from
/// the phase's start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failback {
    pub ms: u64,
    pub faults: Vec<Timed>,
}

impl Schedule {
    /// The schedule of `seed` for phases of `before_ms` and `after_ms`, with instances whose
    /// session timeout is `session_ms`.
    pub fn draw(seed: u64, before_ms: u64, after_ms: u64, session_ms: u64) -> Schedule {
        let mut rng = Rng::new(seed);
        let mode = if rng.chance(50) {
            Mode::Planned
        } else {
            Mode::Unplanned
        };
        let driver = rng.range(0, INSTANCES as u64 - 1) as usize;
        let before = faults(&mut rng, before_ms, session_ms);
        let at_failover = match rng.range(0, 2) {
            0 => AtFailover::Nothing,
            1 => {
                let other = (driver + rng.range(1, INSTANCES as u64 - 1) as usize) % INSTANCES;
                AtFailover::PauseOther {
                    instance: other,
                    ms: pause_ms(&mut rng, session_ms),
                }
            }
            _ => AtFailover::KillDriver {
                after_ms: rng.range(0, 1500),
                ms: rng.range(2_000, 8_000),
            },
        };
        let after = faults(&mut rng, after_ms, session_ms);
        let operations = operations(seed, before_ms);
        let failback = failback(seed, after_ms);
        let network = network(seed, before_ms, session_ms);
        Schedule {
            seed,
            mode,
            driver,
            before_ms,
            after_ms,
            before,
            at_failover,
            after,
            operations,
            failback,
            network,
        }
    }

    /// Every fault of the schedule.
    pub fn fault_count(&self) -> usize {
        self.before.len()
            + self.after.len()
            + usize::from(self.at_failover != AtFailover::Nothing)
            + self.failback.as_ref().map_or(0, |f| f.faults.len())
            + self.network.len()
    }
}

/// The operations of a run before its failover. Drawn from a stream of their own, so that a
/// seed's faults are the ones it drew before operations existed: each with even odds, a rolling
/// restart in the first half of the phase and a pause of the mirror (2–8 s) ending at least 15 s
/// before the failover.
fn operations(seed: u64, before_ms: u64) -> Vec<Operation> {
    let mut rng = Rng::new(seed ^ 0x6F70_6572_6174_6F72);
    let mut ops = Vec::new();
    if before_ms >= 30_000 && rng.chance(50) {
        ops.push(Operation::RollingRestart {
            at_ms: rng.range(5_000, before_ms / 2),
            gap_ms: rng.range(1_000, 3_000),
        });
    }
    if before_ms >= 30_000 && rng.chance(50) {
        let ms = rng.range(2_000, 8_000);
        ops.push(Operation::PauseMirror {
            at_ms: rng.range(3_000, before_ms - 15_000 - ms),
            through: rng.range(0, INSTANCES as u64 - 1) as usize,
            ms,
        });
    }
    ops.sort_by_key(Operation::at_ms);
    ops
}

/// The failback of a run, drawn from a stream of its own (the seed's other draws are the ones
/// it drew before failbacks existed): with odds of 3 in 4, a phase of a quarter to half of the
/// phase after the failover (15 s at least), with faults one after the other (one to three,
/// and one more per 40 s of the phase), each ending within it: the failback gateway killed
/// (1–5 s) or paused (1–4 s), or a destination broker (its source's) killed (2–8 s).
fn failback(seed: u64, after_ms: u64) -> Option<Failback> {
    let mut rng = Rng::new(seed ^ 0x6661_696C_6261_636B);
    if !rng.chance(75) {
        return None;
    }
    let ms = rng.range(after_ms / 4, after_ms / 2).max(15_000);
    let mut faults = Vec::new();
    let mut at = rng.range(1_000, 4_000);
    for _ in 0..rng.range(1, 3 + ms / 40_000) {
        let fault = match rng.range(0, 3) {
            0 | 1 => Fault::KillGateway {
                instance: FAILBACK,
                ms: rng.range(1_000, 5_000),
            },
            2 => Fault::PauseGateway {
                instance: FAILBACK,
                ms: rng.range(1_000, 4_000),
            },
            _ => Fault::KillBroker {
                node: 2 + rng.range(0, 1) as u32,
                ms: rng.range(2_000, 8_000),
            },
        };
        if at + fault.ms() + 1_000 > ms {
            break;
        }
        faults.push(Timed { at_ms: at, fault });
        at += fault.ms() + rng.range(1_000, 3_000);
    }
    Some(Failback { ms, faults })
}

/// The network faults of a run before its failover, drawn from a stream of their own (the
/// seed's other draws are the ones it drew before they existed): with even odds, one after the
/// other (one, plus one per minute of the phase, three at most), each on a random instance and
/// ending at least 10 s before the failover: a partition from the brokers (1 s to the session
/// timeout plus 3 s) or, with even odds, the loss of 10–40 % of its packets to them (3–10 s).
fn network(seed: u64, before_ms: u64, session_ms: u64) -> Vec<Timed> {
    let mut rng = Rng::new(seed ^ 0x6E65_7477_6F72_6B73);
    let mut out = Vec::new();
    if before_ms < 20_000 || !rng.chance(50) {
        return out;
    }
    let mut at = rng.range(2_000, 8_000);
    for _ in 0..(1 + before_ms / 60_000).min(3) {
        let instance = rng.range(0, INSTANCES as u64 - 1) as usize;
        let (loss_percent, ms) = if rng.chance(50) {
            (100, rng.range(1_000, session_ms + 3_000))
        } else {
            (rng.range(10, 40), rng.range(3_000, 10_000))
        };
        if at + ms + 10_000 > before_ms {
            break;
        }
        let fault = Fault::Network {
            instance,
            loss_percent,
            ms,
        };
        out.push(Timed { at_ms: at, fault });
        at += ms + rng.range(2_000, 8_000);
    }
    out
}

/// A pause: short (1–3 s) or past the session timeout (by 2–5 s).
fn pause_ms(rng: &mut Rng, session_ms: u64) -> u64 {
    if rng.chance(50) {
        rng.range(1_000, 3_000)
    } else {
        session_ms + rng.range(2_000, 5_000)
    }
}

/// Faults one after the other over a phase of `phase_ms`, each ending before the phase does, a
/// gap of 1–4 s between them.
fn faults(rng: &mut Rng, phase_ms: u64, session_ms: u64) -> Vec<Timed> {
    let mut out = Vec::new();
    let mut at = rng.range(2_000, 5_000);
    loop {
        let instance = rng.range(0, INSTANCES as u64 - 1) as usize;
        let fault = match rng.range(0, 11) {
            0..=3 => Fault::PauseGateway {
                instance,
                ms: pause_ms(rng, session_ms),
            },
            4..=7 => Fault::KillGateway {
                instance,
                ms: rng.range(1_000, 6_000),
            },
            8..=9 => Fault::FullDisk {
                instance,
                ms: rng.range(2_000, 10_000),
            },
            _ => Fault::KillBroker {
                node: 2 + rng.range(0, 1) as u32,
                ms: rng.range(2_000, 8_000),
            },
        };
        if at + fault.ms() + 1_000 > phase_ms {
            return out;
        }
        out.push(Timed { at_ms: at, fault });
        at += fault.ms() + rng.range(1_000, 4_000);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_schedule() {
        assert_eq!(
            Schedule::draw(7, 60_000, 40_000, 6_000),
            Schedule::draw(7, 60_000, 40_000, 6_000)
        );
    }

    #[test]
    fn seeds_draw_both_modes_and_every_fault() {
        let all: Vec<Schedule> = (0..64)
            .map(|s| Schedule::draw(s, 60_000, 40_000, 6_000))
            .collect();
        assert!(all.iter().any(|s| s.mode == Mode::Planned));
        assert!(all.iter().any(|s| s.mode == Mode::Unplanned));
        let faults: Vec<Fault> = all
            .iter()
            .flat_map(|s| s.before.iter().chain(&s.after).map(|t| t.fault))
            .collect();
        assert!(faults
            .iter()
            .any(|f| matches!(f, Fault::PauseGateway { ms, .. } if *ms > 6_000)));
        assert!(faults
            .iter()
            .any(|f| matches!(f, Fault::KillGateway { .. })));
        assert!(faults
            .iter()
            .any(|f| matches!(f, Fault::KillBroker { node: 2, .. })));
        assert!(faults
            .iter()
            .any(|f| matches!(f, Fault::KillBroker { node: 3, .. })));
        assert!(faults.iter().any(|f| matches!(f, Fault::FullDisk { .. })));
        assert!(all
            .iter()
            .any(|s| matches!(s.at_failover, AtFailover::KillDriver { .. })));
    }

    #[test]
    fn seeds_draw_both_operations_and_a_schedule_without_them_still_reads() {
        let all: Vec<Schedule> = (0..32)
            .map(|s| Schedule::draw(s, 72_000, 48_000, 6_000))
            .collect();
        let ops: Vec<Operation> = all.iter().flat_map(|s| s.operations.clone()).collect();
        assert!(ops
            .iter()
            .any(|o| matches!(o, Operation::RollingRestart { .. })));
        assert!(ops
            .iter()
            .any(|o| matches!(o, Operation::PauseMirror { .. })));
        for o in &ops {
            if let Operation::PauseMirror { at_ms, ms, .. } = o {
                assert!(at_ms + ms + 15_000 <= 72_000, "{o:?}");
            }
        }
        let mut s = Schedule::draw(3, 72_000, 48_000, 6_000);
        let mut v = serde_json::to_value(&s).expect("json");
        v.as_object_mut().expect("object").remove("operations");
        s.operations.clear();
        assert_eq!(serde_json::from_value::<Schedule>(v).expect("read"), s);
    }

    #[test]
    fn a_schedule_written_before_brokers_were_drawn_kills_the_second() {
        let t: Timed =
            serde_json::from_str(r#"{"at_ms":5,"fault":"kill_broker","ms":100}"#).expect("parses");
        assert_eq!(t.fault, Fault::KillBroker { node: 2, ms: 100 });
    }

    #[test]
    fn every_fault_ends_within_its_phase() {
        for seed in 0..200 {
            let s = Schedule::draw(seed, 30_000, 20_000, 6_000);
            for (faults, phase) in [(&s.before, 30_000), (&s.after, 20_000)] {
                for t in faults {
                    assert!(t.at_ms + t.fault.ms() < phase, "seed {seed}: {t:?}");
                }
            }
        }
    }

    #[test]
    fn seeds_draw_failbacks_whose_faults_hit_the_failback_gateway_or_a_broker_within_the_phase() {
        let all: Vec<Schedule> = (0..64)
            .map(|s| Schedule::draw(s, 30_000, 20_000, 6_000))
            .collect();
        assert!(all.iter().any(|s| s.failback.is_none()));
        let backs: Vec<&Failback> = all.iter().filter_map(|s| s.failback.as_ref()).collect();
        assert!(backs.len() > 32, "{} of 64", backs.len());
        let faults: Vec<Timed> = backs.iter().flat_map(|f| f.faults.clone()).collect();
        for kind in 0..3 {
            assert!(faults.iter().any(|t| match (kind, t.fault) {
                (0, Fault::KillGateway { instance, .. }) => instance == FAILBACK,
                (1, Fault::PauseGateway { instance, .. }) => instance == FAILBACK,
                (2, Fault::KillBroker { .. }) => true,
                _ => false,
            }));
        }
        for f in &backs {
            assert!(f.ms >= 15_000);
            for t in &f.faults {
                assert!(t.at_ms + t.fault.ms() < f.ms, "{t:?} in {} ms", f.ms);
                assert!(!matches!(t.fault, Fault::FullDisk { .. }));
            }
        }
    }

    #[test]
    fn a_schedule_written_before_failbacks_reads_without_one() {
        let mut s = Schedule::draw(3, 72_000, 48_000, 6_000);
        let mut v = serde_json::to_value(&s).expect("json");
        v.as_object_mut().expect("object").remove("failback");
        s.failback = None;
        assert_eq!(serde_json::from_value::<Schedule>(v).expect("read"), s);
    }

    #[test]
    fn seeds_draw_partitions_and_losses_that_end_ten_seconds_before_the_failover() {
        let all: Vec<Schedule> = (0..64)
            .map(|s| Schedule::draw(s, 72_000, 48_000, 6_000))
            .collect();
        let net: Vec<Timed> = all.iter().flat_map(|s| s.network.clone()).collect();
        assert!(all.iter().any(|s| s.network.is_empty()));
        assert!(net.iter().any(|t| matches!(
            t.fault,
            Fault::Network {
                loss_percent: 100,
                ..
            }
        )));
        assert!(net.iter().any(|t| matches!(
            t.fault,
            Fault::Network {
                loss_percent: 10..=40,
                ..
            }
        )));
        for t in &net {
            assert!(t.at_ms + t.fault.ms() + 10_000 <= 72_000, "{t:?}");
        }
        // A schedule written before network faults existed reads without them.
        let mut s = Schedule::draw(3, 72_000, 48_000, 6_000);
        let mut v = serde_json::to_value(&s).expect("json");
        v.as_object_mut().expect("object").remove("network");
        s.network.clear();
        assert_eq!(serde_json::from_value::<Schedule>(v).expect("read"), s);
    }

    #[test]
    fn a_schedule_reads_back_from_its_json() {
        let s = Schedule::draw(3, 60_000, 40_000, 6_000);
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Schedule>(&text).unwrap(), s);
    }
}
