//! The chaos run's MirrorMaker 2 (`--profile mm2`): how it is configured and started, copying
//! the topic from the source through the three instances' mirror listeners.
//!
//! Owns: MirrorMaker 2's properties in the run. Must not touch: the instances, the rules.

use std::path::Path;

use super::gateways::mirror_addr;
use super::plan::INSTANCES;
use super::TOPIC;

/// Starts MirrorMaker 2 copying the topic from the source into the destination through the
/// three instances' mirror listeners (identity names, an idempotent producer, `read_uncommitted`
/// as it comes), syncing the application group's offsets every second. Its Connect topics live
/// on the destination, replicated three times so that a killed broker takes none offline. Its
/// one Connect worker takes its tasks back at once when it rejoins its group (by default
/// Connect waits up to five minutes for a worker it lost; seed 101 of the first campaign lost
/// its membership while instances restarted and copied nothing for five minutes). A worker
/// setting is MirrorMaker 2's under the target cluster's alias (`dst.`): at the top level, and
/// under the flow's prefix (`src->dst.`, the connectors' settings), it is ignored (Kafka's
/// `MirrorMakerConfig::workerConfig` starts from the target cluster's properties).
pub fn start(dir: &Path, source: &str) -> Result<crate::mirror::Mm2, String> {
    let target: Vec<String> = (0..INSTANCES).map(mirror_addr).collect();
    let extra = "checkpoints.topic.replication.factor = 3\n\
         heartbeats.topic.replication.factor = 3\n\
         offset.storage.replication.factor = 3\n\
         status.storage.replication.factor = 3\n\
         config.storage.replication.factor = 3\n\
         emit.checkpoints.enabled = true\n\
         emit.checkpoints.interval.seconds = 1\n\
         sync.group.offsets.enabled = true\n\
         sync.group.offsets.interval.seconds = 1\n\
         groups = chaos-app\n\
         offset.lag.max = 10\n\
         dst.producer.enable.idempotence = true\n\
         dst.scheduled.rebalance.max.delay.ms = 0\n";
    crate::mirror::Mm2::start(&dir.join("mm2"), source, &target.join(","), TOPIC, extra)
}
