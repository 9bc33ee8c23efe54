//! The consistent cut across rounds on real clusters (P2, found by chaos seeds 21 and 27): a
//! group whose offsets stopped moving reaches the destination once the mirror holds what
//! transactions wrote before those offsets were first read, even while the source's end keeps
//! running ahead of the mirror, here held by a transaction left open.

use rdkafka::producer::{DefaultProducerContext, ThreadedProducer};

use super::*;

/// A transactional producer on the source that the test drives by hand.
fn transactional_producer(source: &str) -> ThreadedProducer<DefaultProducerContext> {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", source)
        .set("transactional.id", harness::unique_topic("cut-txn"))
        .set("transaction.timeout.ms", "300000")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("transactional producer");
    harness::init_transactions(&producer);
    producer
}

fn send(producer: &ThreadedProducer<DefaultProducerContext>, topic: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let key = format!("{prefix}-{i}");
        producer
            .send(BaseRecord::to(topic).key(&key).payload(&key).partition(0))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// P2: every round asked for the source's end *at that round*; with a transaction open on the
/// source from then on, no round's cut ever held and the stopped group's offsets never reached
/// the destination (red before the fix: still `waiting_for_mirror` after 30 s, "transactions
/// open on the source when the offsets were read have not completed").
#[test]
fn a_stopped_groups_offsets_reach_the_destination_while_a_transaction_stays_open_on_the_source() {
    let source = harness::cluster("source");
    let input = harness::unique_topic("cut-input");
    let output = harness::unique_topic("cut-output");
    harness::create_topic(&source, &input, 1, None);
    harness::create_topic(&source, &output, 1, None);
    produce(&source, &input, "in", 50, 1);
    let name = "cut";
    let gw = TestGateway::start(groups_config(name, &[&input, &output], &source));
    wait_mirrored(&gw, name, &source, &input, 1);

    // The mirror stands still while the application writes a transaction and commits its
    // input offsets: the rounds that read them need the mirror to hold that transaction.
    mirror_op(&gw.admin(), name, "pause");
    let producer = transactional_producer(&source);
    producer.begin_transaction().expect("begin");
    send(&producer, &output, "out", 10);
    producer
        .commit_transaction(Duration::from_secs(30))
        .expect("commit");
    let group = harness::unique_topic("cut-app");
    let read = rdkafka_consume(&source, &input, &group, 30);
    wait_for(
        "a round read the group's offsets and waits for the mirror",
        Duration::from_secs(30),
        || {
            group_json(&gw.admin(), name, &group)
                .is_some_and(|g| g["state"] == "waiting_for_mirror")
        },
    );

    // From now on the source's end of the output runs ahead of anything a round can wait for:
    // a transaction stays open there.
    producer
        .begin_transaction()
        .expect("begin the transaction left open");
    send(&producer, &output, "open", 5);
    mirror_op(&gw.admin(), name, "resume");

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let committed = destination_committed(&group, &input, 1);
        if committed == positions(&read) {
            break;
        }
        if Instant::now() >= deadline {
            let g = group_json(&gw.admin(), name, &group);
            let _ = producer.abort_transaction(Duration::from_secs(10));
            panic!(
                "the stopped group's offsets {:?} did not reach the destination in 30 s (it has {committed:?}): {g:?}",
                positions(&read)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    producer
        .abort_transaction(Duration::from_secs(30))
        .expect("abort the transaction left open");
}
