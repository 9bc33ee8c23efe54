//! The link between the agent and its mirrors' group offset syncs ([`crate::sync::groups`]):
//! each sync is built here over the agent's source connection settings and reads the agent's
//! offset map of its mirror. Its gate: this instance owns the mirror's agent and, several
//! instances, the peers do not refuse (lease, failover announced: `group_sync_refusal`).
//!
//! Owns: creating the syncs and registering their metrics. Must not touch: the syncs' rules,
//! the agent's tasks.

use std::sync::Arc;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::sync::groups::io::RoundKind;
use crate::sync::groups::kafka_io::{KafkaGroupIo, MapLookup, TxnLookup};
use crate::sync::groups::{metrics as group_metrics, Gate, GroupSync};

use super::{lock, MirrorAgent, MirrorGroupSync};

/// The group offset sync of every mirror that has it on, reading the agent's offset maps.
pub(super) fn start_group_syncs(
    config: &Config,
    mirrors: &[Arc<MirrorAgent>],
    metrics: &Metrics,
) -> Result<Vec<Arc<MirrorGroupSync>>, String> {
    let counters = group_metrics::GroupMetrics::new().map_err(|e| e.to_string())?;
    counters.register(metrics.registry());
    let gauges = group_metrics::GaugeCollector::new().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for m in mirrors {
        let cfg = &config.mirrors[m.idx].groups;
        if !cfg.enabled {
            continue;
        }
        let weak = Arc::downgrade(m);
        let maps: MapLookup = Arc::new(move |t, p| {
            let m = weak.upgrade()?;
            let o = lock(&m.offsets);
            o.get(t, p).cloned()
        });
        let weak = Arc::downgrade(m);
        let txns: TxnLookup = Arc::new(move |t, p| {
            weak.upgrade().is_some_and(|m| {
                lock(&m.offsets)
                    .get(t, p)
                    .is_some_and(|map| map.transactional)
            })
        });
        let io = KafkaGroupIo::new(
            &m.name,
            m.idx,
            m.source.clone(),
            m.source_connector.clone(),
            m.cluster.clone(),
            m.dest_timeout,
            m.router.clone(),
            m.controller.clone(),
            maps,
        )
        .with_transactions(txns);
        let weak = Arc::downgrade(m);
        // Asked when a round starts and before every commit (review G14).
        let may_write: Gate = Arc::new(move |kind| {
            let m = weak.upgrade().ok_or("the agent has stopped")?;
            if lock(&m.owner_epoch).is_none() {
                return Err(
                    "not the agent's owner: another instance runs the mirror's agent".into(),
                );
            }
            match m
                .controller
                .group_sync_refusal(&m.name, kind == RoundKind::Final)
            {
                Some(why) => Err(why),
                None => Ok(()),
            }
        });
        let sync = GroupSync::new(&m.name, cfg, io, counters.clone())
            .map_err(|e| format!("mirror {:?}: groups: {e}", m.name))?
            .with_gate(may_write);
        let sync = Arc::new(sync);
        gauges.add(&(sync.clone() as Arc<dyn group_metrics::SyncGauges>));
        out.push(sync);
    }
    let _ = metrics.registry().register(Box::new(gauges));
    Ok(out)
}
