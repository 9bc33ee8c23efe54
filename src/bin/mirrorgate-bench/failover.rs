//! `mirrorgate-bench failover`: a mirror of many partitions on the rig's destination, each
//! holding mirrored batches of a few producers; the failover is called through the admin API
//! and timed until every partition is STOPPED (barrier written, PSM cleared) on the instance
//! called, then on every instance. The gateways are processes of the gateway binary
//! (`fleet.rs`), so that an earlier build (`--baseline BIN`) runs the very same measurement,
//! interleaved with this build's, in the same run: before and after side by side.
//!
//! Per binary and repetition: the failover with `--instances N` gateways sharing a state topic
//! (when N > 1), the same with one gateway, and the takeover of a driver killed after its
//! barriers (`takeover.rs`, when N > 1). Every measurement creates its own topics (in requests
//! the controller accepts: `topics.rs`) and deletes them afterwards. The last line is one JSON
//! object: this build's figures (medians over `--runs`), each step's time after the call from
//! the failover report (`steps`, `takeover_steps`), and the same for every baseline with the
//! ratios to the first one.
//!
//! Owns: the shape of the run and its figures. Must not touch: the gateways' configuration
//! (`fleet.rs`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::failover_fixture::{fresh_topics, leaders, write_mirrored, Measured};
use crate::fleet::{ports, wait_stopped, Fleet};
use crate::Clusters;

/// What to run.
pub struct Options {
    /// Topics; without, `partitions` is the total, over topics of at most 100 partitions.
    pub topics: Option<usize>,
    /// Partitions per topic (with `topics`), else in total.
    pub partitions: i32,
    pub quick: bool,
    pub instances: usize,
    /// Earlier gateway builds measured side by side.
    pub baselines: Vec<PathBuf>,
    pub runs: usize,
    /// Leave the takeover out.
    pub no_takeover: bool,
}

/// Partitions per topic when only the total is given.
const PER_TOPIC: i64 = 100;

/// The topic sizes of `opts`: `(topics, partitions of each)`.
pub fn shape(opts: &Options) -> Vec<i32> {
    if opts.quick {
        return vec![50; 2];
    }
    if let Some(t) = opts.topics {
        return vec![opts.partitions.max(1); t.max(1)];
    }
    let total = i64::from(opts.partitions.max(1));
    let topics = (total + PER_TOPIC - 1) / PER_TOPIC;
    (0..topics)
        .map(|i| (total / topics + i64::from(i < total % topics)) as i32)
        .collect()
}

/// The figures of one binary.
#[derive(Default)]
struct Figures {
    multi: Vec<Measured>,
    single: Vec<Measured>,
    takeover: Vec<Measured>,
    /// Why a measurement could not be made (a baseline build without several instances):
    /// that measurement is not tried again.
    errors: Vec<(Kind, String)>,
}

/// The measurements of one repetition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Multi,
    Single,
    Takeover,
}

impl Figures {
    fn failed(&self, k: Kind) -> bool {
        self.errors.iter().any(|(e, _)| *e == k)
    }
}

pub fn run(opts: Options) -> Result<Value, String> {
    let (_clusters, addrs) = Clusters::ensure(&["destination"])?;
    let destination = crate::cluster_brokers(&addrs, "destination")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let sizes = shape(&opts);
    let total: i64 = sizes.iter().map(|p| i64::from(*p)).sum();
    let mut bins = vec![crate::process::gateway_binary()?];
    bins.extend(opts.baselines.iter().cloned());
    let mut figures: Vec<Figures> = bins.iter().map(|_| Figures::default()).collect();
    let runs = opts.runs.max(1);
    for r in 0..runs {
        // Interleaved, the first binary rotating per repetition.
        for k in 0..bins.len() {
            let b = (r + k) % bins.len();
            eprintln!("run {}/{runs}: {}", r + 1, bins[b].display());
            let measured = rt.block_on(measure(
                &opts,
                &destination,
                &bins[b],
                &sizes,
                &mut figures[b],
            ));
            if let (0, Err(e)) = (b, measured) {
                return Err(e);
            }
        }
    }
    let mut out = summary(&figures[0], &opts);
    let base: Vec<Value> = bins[1..]
        .iter()
        .zip(&figures[1..])
        .map(|(bin, f)| {
            let mut v = summary(f, &opts);
            v["binary"] = json!(bin.display().to_string());
            v["errors"] = json!(f
                .errors
                .iter()
                .map(|(k, e)| format!("{k:?}: {e}"))
                .collect::<Vec<_>>());
            v
        })
        .collect();
    if let Some(b) = base.first() {
        for key in [
            "seconds",
            "all_instances_stopped_seconds",
            "single_instance_seconds",
            "takeover_seconds",
        ] {
            let ratio = match (out[key].as_f64(), b[key].as_f64()) {
                (Some(x), Some(y)) if y > 0.0 => json!(x / y),
                _ => Value::Null,
            };
            out[format!("{key}_vs_baseline")] = ratio;
        }
    }
    out["bench"] = json!("failover");
    out["instances"] = json!(opts.instances.max(1));
    out["partitions"] = json!(total);
    out["topics"] = json!(sizes.len());
    out["runs"] = json!(runs);
    out["baselines"] = json!(base);
    Ok(out)
}

/// One repetition for binary `bin`: the failover with several instances, with one, then the
/// takeover; appended to `f`. A measurement that fails is recorded in `f.errors` (and not
/// tried again), the others go on; the error is returned.
async fn measure(
    opts: &Options,
    destination: &[String],
    bin: &std::path::Path,
    sizes: &[i32],
    f: &mut Figures,
) -> Result<(), String> {
    let several = opts.instances > 1;
    let mut last = Ok(());
    for kind in [Kind::Multi, Kind::Single, Kind::Takeover] {
        let wanted = match kind {
            Kind::Multi => several,
            Kind::Single => true,
            Kind::Takeover => several && !opts.no_takeover,
        };
        if !wanted || f.failed(kind) {
            continue;
        }
        let r = match kind {
            Kind::Multi => failover_once(destination, bin, sizes, opts.instances).await,
            Kind::Single => failover_once(destination, bin, sizes, 1).await,
            Kind::Takeover => crate::takeover::run(destination, bin, sizes, opts.instances).await,
        };
        match (r, kind) {
            (Ok(m), Kind::Multi) => f.multi.push(m),
            (Ok(m), Kind::Single) => f.single.push(m),
            (Ok(m), Kind::Takeover) => f.takeover.push(m),
            (Err(e), _) => {
                eprintln!("{} ({kind:?}): {e}", bin.display());
                f.errors.push((kind, e.clone()));
                last = Err(e);
            }
        }
    }
    last
}

fn median_of(v: &[Measured], f: impl Fn(&Measured) -> f64) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    json!(crate::median(v.iter().map(f).collect()))
}

/// The JSON figures of one binary (medians over the repetitions).
fn summary(f: &Figures, opts: &Options) -> Value {
    let main = if opts.instances > 1 {
        &f.multi
    } else {
        &f.single
    };
    let mut v = json!({
        "seconds": median_of(main, |m| m.seconds),
        "all_instances_stopped_seconds": median_of(main, |m| m.everywhere),
        "steps": main.last().map(|m| m.steps.clone()),
        "each_seconds": main.iter().map(|m| m.seconds).collect::<Vec<_>>(),
    });
    if opts.instances > 1 {
        v["single_instance_seconds"] = median_of(&f.single, |m| m.seconds);
        v["single_instance_steps"] = json!(f.single.last().map(|m| m.steps.clone()));
        v["ratio_to_single_instance"] =
            match (v["seconds"].as_f64(), v["single_instance_seconds"].as_f64()) {
                (Some(a), Some(b)) if b > 0.0 => json!(a / b),
                _ => Value::Null,
            };
        if !opts.no_takeover {
            v["takeover_seconds"] = median_of(&f.takeover, |m| m.seconds);
            v["takeover_each_seconds"] =
                json!(f.takeover.iter().map(|m| m.seconds).collect::<Vec<_>>());
            v["takeover_session_timeout_seconds"] =
                json!(f.takeover.last().and_then(|m| m.session_timeout_s));
            v["takeover_steps"] = json!(f.takeover.last().map(|m| m.steps.clone()));
        }
    }
    v
}

/// The failover of mirror `bench` over fresh topics of `sizes` with `instances` gateways of
/// `bin`, called on the first: seconds to every partition STOPPED there, and everywhere.
async fn failover_once(
    destination: &[String],
    bin: &std::path::Path,
    sizes: &[i32],
    instances: usize,
) -> Result<Measured, String> {
    let (prefix, names) = fresh_topics(destination, "fo", sizes).await?;
    let r = async {
        let total: i64 = sizes.iter().map(|p| i64::from(*p)).sum();
        let mut fleet = Fleet::start(bin, destination, &prefix, instances, &[])?;
        fleet
            .wait_ready(0..instances, total, Duration::from_secs(600))
            .await?;
        let (_, mirror, _) = ports(0);
        write_mirrored(&leaders(destination, &names).await?, [mirror, mirror + 1]).await?;
        // For a profiler to attach (MIRRORGATE_BENCH_LOG_DIR keeps the gateways' logs).
        let pids: Vec<String> = fleet.gateways.iter().map(|g| g.pid().to_string()).collect();
        eprintln!(
            "failover call: {instances} instances, pids {}",
            pids.join(",")
        );
        let started = Instant::now();
        fleet.call_failover(0).await?;
        wait_stopped(&fleet.admins[..1], total, started).await?;
        let seconds = started.elapsed().as_secs_f64();
        wait_stopped(&fleet.admins, total, started).await?;
        let everywhere = started.elapsed().as_secs_f64();
        if instances > 1 {
            // Every other instance fenced before the barrier (else the failover could not end).
            // The driver may list itself too (it records its own drain: review G1).
            let (_, peers) =
                crate::fleet::admin(&fleet.admins[0], hyper::Method::GET, "/v1/instances").await?;
            let me = peers["instance"].as_str().unwrap_or_default();
            let others_fenced = peers["failovers"][0]["fenced"]
                .as_array()
                .map(|f| f.iter().filter(|i| i.as_str() != Some(me)).count())
                .unwrap_or(0);
            if others_fenced + 1 != instances {
                return Err(format!("not every instance fenced: {peers}"));
            }
        }
        Ok(Measured {
            seconds,
            everywhere,
            steps: fleet.timeline(0).await,
            session_timeout_s: None,
        })
    }
    .await;
    let mut all = names;
    all.push(format!("{prefix}-state"));
    crate::topics::delete(&destination[0], &all).await;
    r
}
