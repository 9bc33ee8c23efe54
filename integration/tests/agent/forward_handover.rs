//! Forward mode across a restart of the gateway. A process that stops cleanly hands its
//! forward listeners' ledgers of acknowledgements and producer ids to the next one, so an
//! unplanned failover after the restart keeps whole producers going and reports everything the
//! destination lacks, what was acknowledged before the restart included. After a crash the next
//! process restores the ledger from the journal the crashed one wrote, for the report.

use super::forward::{
    assert_report_names_what_is_lacking, assert_whole_producer_went_on, forward_config,
    forward_side as side, producer_ids, wait_lag_zero, writes_on_after_the_failover,
};
use super::*;

/// Once mirror `name` (2 partitions) has mirrored everything, pause it and wait until `writer`
/// had `n` more records acknowledged by the source: they stay unmirrored.
fn pause_leaving_unmirrored(admin: &str, name: &str, writer: &SourceWriter, n: usize) {
    wait_lag_zero(admin, name, 2);
    crate::groups::mirror_op(admin, name, "pause");
    let at_pause = writer.acked();
    wait_for(
        "records acknowledged by the source after the pause",
        Duration::from_secs(60),
        || writer.acked() >= at_pause + n,
    );
}

/// Two mirrors with forward listeners on the source cluster, their producers writing through
/// them. Mirror `hol` is paused, so what its producer gets acknowledged stays unmirrored;
/// mirror `hok` is caught up and its producer holds its sends. The gateway is stopped with
/// SIGTERM and started again; `hol`'s producer goes on writing through it. Then both mirrors
/// fail over (not a switchover: no catch-up). Red before the handover: `hok`'s producer, whose
/// id came before the restart, was refused after the failover (its epoch bumped), and the report
/// of `hol` left out what was acknowledged before the restart.
#[test]
fn after_a_clean_restart_an_unplanned_failover_keeps_whole_forwarded_producers_and_names_all_the_others_lack(
) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let lost_topic = harness::unique_topic("handover-lost");
    let kept_topic = harness::unique_topic("handover-kept");
    harness::create_topic(&source, &lost_topic, 2, None);
    harness::create_topic(&source, &kept_topic, 2, None);
    let (mut cfg, lost_forward) = forward_config("hol", &[&lost_topic], &source);
    let (kept_cfg, kept_forward) = forward_config("hok", &[&kept_topic], &source);
    cfg.mirrors.push(kept_cfg.mirrors[0].clone());
    let mut gw = crate::gw::ProcessGateway::start(cfg, &[]);
    let admin = gw.admin();
    let lossy = SourceWriter::start(&lost_forward, &lost_topic, "lost", 1_000_000, 200);
    let whole = SourceWriter::start(&kept_forward, &kept_topic, "kept", 1_000_000, 200);
    wait_for(
        "records through the forward listeners",
        Duration::from_secs(60),
        || lossy.acked() >= 200 && whole.acked() >= 200,
    );
    pause_leaving_unmirrored(&admin, "hol", &lossy, 300);
    whole.hold(true);
    std::thread::sleep(Duration::from_millis(500));
    wait_caught_up(&admin, "hok", &source, &kept_topic, 2);
    let kept_ids: Vec<(i64, i32)> = (0..2)
        .flat_map(|p| producer_ids(&source, &kept_topic, p))
        .collect();

    let status = gw.terminate(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "stopped cleanly: {status:?}; log:\n{}",
        gw.log()
    );
    assert!(
        gw.log().contains("ledger of acknowledgements handed over"),
        "handed over; log:\n{}",
        gw.log()
    );
    gw.restart(&[]);
    assert!(
        gw.log().contains("took over the forward listener's ledger"),
        "taken over; log:\n{}",
        gw.log()
    );
    let at_restart = lossy.acked();
    wait_for(
        "records through the restarted gateway",
        Duration::from_secs(60),
        || lossy.acked() >= at_restart + 100,
    );

    failover(&admin, "hol");
    failover(&admin, "hok");
    wait_stopped(&admin, "hol");
    wait_stopped(&admin, "hok");
    wait_for(
        "the routes on the destination",
        Duration::from_secs(10),
        || side(&admin, "hol") == "destination" && side(&admin, "hok") == "destination",
    );
    let whole_acked = writes_on_after_the_failover(whole);
    let lossy_keys = lossy.acked_keys();
    let _ = lossy.finish_with_errors();

    // The whole producer went on under the id and epoch the source gave it before the restart;
    // the report names everything the lossy one lacks, what was acknowledged before the
    // restart included.
    assert_whole_producer_went_on(&destination, &kept_topic, "kept", &kept_ids, whole_acked);
    let lacking_total = assert_report_names_what_is_lacking(
        &admin,
        "hol",
        &destination,
        (&lost_topic, None),
        &lossy_keys,
    );
    assert!(
        lacking_total >= 400,
        "acknowledged after the pause, before and after the restart ({lacking_total})"
    );
}

/// A crash: the gateway is killed (SIGKILL) while mirror `jol` is paused, after its producer had
/// at least 300 records acknowledged and then sent nothing for 3 s (the journal is written
/// about once a second). The next process restores the ledger from the journal, and the
/// producer writes on through it. The report of an unplanned failover names exactly the
/// acknowledged records the destination lacks, those from before the crash included, and says
/// that what passed after the journal's last write before a crash is not counted. Red without
/// the journal: the report named only what passed after the restart.
///
/// Mirror `jok`'s producer got its id before the crash and writes on after it; its mirror
/// catches up. The agent mirrors past the source's log ends read after the restart, so after
/// the unplanned failover that producer goes on with its id and epoch, and `jok`'s report says
/// its figures are whole. Red before the restart's log ends were read: it was refused and
/// bumped its epoch, as every producer from before a crash.
#[test]
fn after_a_crash_the_report_of_an_unplanned_failover_names_what_the_journal_kept_and_says_so() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("journal-lost");
    let kept_topic = harness::unique_topic("journal-kept");
    harness::create_topic(&source, &topic, 2, None);
    harness::create_topic(&source, &kept_topic, 2, None);
    let (mut cfg, forward) = forward_config("jol", &[&topic], &source);
    let (kept_cfg, kept_forward) = forward_config("jok", &[&kept_topic], &source);
    cfg.mirrors.push(kept_cfg.mirrors[0].clone());
    let mut gw = crate::gw::ProcessGateway::start(cfg, &[]);
    let admin = gw.admin();
    let writer = SourceWriter::start(&forward, &topic, "lost", 1_000_000, 200);
    let whole = SourceWriter::start(&kept_forward, &kept_topic, "kept", 1_000_000, 200);
    wait_for(
        "records through the forward listeners",
        Duration::from_secs(60),
        || writer.acked() >= 200 && whole.acked() >= 200,
    );
    pause_leaving_unmirrored(&admin, "jol", &writer, 300);
    writer.hold(true);
    std::thread::sleep(Duration::from_secs(3));

    gw.kill9();
    gw.restart(&[]);
    assert!(
        gw.log().contains("restored from its journal"),
        "the ledger restored; log:\n{}",
        gw.log()
    );
    let at_restart = (writer.acked(), whole.acked());
    writer.hold(false);
    wait_for(
        "records through the restarted gateway",
        Duration::from_secs(60),
        || writer.acked() >= at_restart.0 + 100 && whole.acked() >= at_restart.1 + 100,
    );
    whole.hold(true);
    std::thread::sleep(Duration::from_millis(500));
    wait_caught_up(&admin, "jok", &source, &kept_topic, 2);
    wait_for(
        "jok's ledger past the source's log ends read after the restart",
        Duration::from_secs(30),
        || super::forward::forward_route(&admin, "jok")["restart"]["state"] == "covered",
    );
    let kept_ids: Vec<(i64, i32)> = (0..2)
        .flat_map(|p| producer_ids(&source, &kept_topic, p))
        .collect();
    failover(&admin, "jol");
    failover(&admin, "jok");
    wait_stopped(&admin, "jol");
    wait_stopped(&admin, "jok");
    wait_for(
        "jok's route on the destination",
        Duration::from_secs(10),
        || side(&admin, "jok") == "destination",
    );
    let whole_acked = writes_on_after_the_failover(whole);
    assert_whole_producer_went_on(&destination, &kept_topic, "kept", &kept_ids, whole_acked);
    let kept_report = crate::agent::completed_report(&admin, "jok");
    assert!(
        kept_report["forwarded"]["inexact"].is_null() && kept_report["forwarded"]["records"] == 0,
        "jok's figures are whole: {}",
        kept_report["forwarded"]
    );

    let keys = writer.acked_keys();
    let _ = writer.finish_with_errors();
    let lacking_total = assert_report_names_what_is_lacking(
        &admin,
        "jol",
        &destination,
        (&topic, Some("crash")),
        &keys,
    );
    assert!(
        lacking_total >= 400,
        "acknowledged after the pause, before and after the crash ({lacking_total})"
    );
}
