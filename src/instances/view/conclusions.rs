//! What a view concluded from the records it read, in a stable order: the compaction tests
//! compare two readers of the state topic with it (test builds only).
//!
//! Owns: that rendering. Must not touch: the rules that reach the conclusions.

use super::PeerView;

impl PeerView {
    /// Everything this view concluded from the records it read, in a stable order (the
    /// compaction tests compare two readers).
    pub fn conclusions(&self) -> String {
        fn sorted<T: std::fmt::Debug>(it: impl Iterator<Item = T>) -> Vec<String> {
            let mut v: Vec<String> = it.map(|x| format!("{x:?}")).collect();
            v.sort();
            v
        }
        format!(
            "failovers {:?}\nmirroring {:?}\nstopped {:?}\nbarrier producers {:?}\nfenced {:?}\nseen {:?}\nagents {}\nagent offsets {:?}\nbarrier from {:?}",
            self.failovers,
            sorted(self.mirroring.iter()),
            sorted(self.stopped.iter()),
            sorted(self.barrier_producers.iter()),
            sorted(self.fenced.iter()),
            sorted(self.seen.keys()),
            self.agents.conclusions(),
            sorted(self.agent_offsets.iter()),
            sorted(self.barrier_from.iter().map(|(m, (f, p))| (m, f, sorted(p.iter())))),
        ) + &format!(
            "\npaused {:?}\nreports {:?}\nknown {:?}\nadopted {:?}\nforward {}\nforwarded losses {:?}",
            sorted(self.paused.iter()),
            self.reports,
            self.known,
            sorted(self.adopted.iter()),
            self.forward.conclusions(),
            self.forwarded_losses,
        )
    }
}
