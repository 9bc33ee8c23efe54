//! The milliseconds a failover step spends in each of its phases, for the step's summary log
//! line (where a slow failover spends its time).
//!
//! Owns: the timing and its rendering (`find=12 write=40 …`). Must not touch: the steps.

/// Milliseconds spent in each phase of one barrier step, for its summary log line.
pub(super) struct StepTimes {
    at: std::time::Instant,
    laps: Vec<(&'static str, u128)>,
}

impl StepTimes {
    pub(super) fn start() -> Self {
        StepTimes {
            at: std::time::Instant::now(),
            laps: Vec::new(),
        }
    }

    /// The time since the previous lap is phase `what`'s.
    pub(super) fn lap(&mut self, what: &'static str) {
        let now = std::time::Instant::now();
        self.laps
            .push((what, now.duration_since(self.at).as_millis()));
        self.at = now;
    }
}

impl std::fmt::Display for StepTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (what, ms)) in self.laps.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{what}={ms}")?;
        }
        Ok(())
    }
}
