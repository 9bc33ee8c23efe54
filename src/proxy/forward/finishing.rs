//! The transactions open through a forward listener, and a hold's *finishing*: held for a
//! switchover while transactions are open, their requests still go to the source, nothing else
//! does, until none is open.
//!
//! Owns: the open transactions and the finishing flag of [`ForwardRoute`]. Must not touch: the
//! side's transitions (the parent module), sockets.

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use tokio::sync::watch;

use super::{ForwardRoute, Side, TRANSACTION_FORGOTTEN};

impl ForwardRoute {
    pub(super) fn open(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Instant>> {
        self.transactions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request of `producer_id`'s transaction passed to the source: it is open.
    pub fn note_transaction(&self, producer_id: i64) {
        self.open().insert(producer_id, Instant::now());
    }

    /// `producer_id`'s transaction ended (its EndTxn answered for good); the last one open ends
    /// a hold's finishing.
    pub fn end_transaction(&self, producer_id: i64) {
        let none_left = {
            let mut open = self.open();
            open.remove(&producer_id);
            open.is_empty()
        };
        if none_left {
            self.stop_finishing();
        }
    }

    /// The producer ids of the transactions open through this listener (sorted; those not
    /// heard of for [`TRANSACTION_FORGOTTEN`] dropped).
    pub fn open_transactions(&self) -> Vec<i64> {
        let mut open = self.open();
        open.retain(|_, seen| seen.elapsed() < TRANSACTION_FORGOTTEN);
        let mut ids: Vec<i64> = open.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// A hold begins: its open transactions may finish. How many are open.
    pub(super) fn start_finishing(&self) -> usize {
        let open = self.open_transactions().len();
        self.finishing.send_replace(open > 0);
        open
    }

    /// Nothing more goes to the source, open transactions or not.
    pub fn stop_finishing(&self) {
        self.finishing
            .send_if_modified(|f| std::mem::replace(f, false));
    }

    /// Whether the route is held while the transactions open at the hold finish on the source.
    pub fn finishing(&self) -> bool {
        *self.finishing.borrow()
    }

    /// Follow [`ForwardRoute::finishing`].
    pub fn subscribe_finishing(&self) -> watch::Receiver<bool> {
        self.finishing.subscribe()
    }

    /// Whether a connection may be served on the source now: on the source side, or held while
    /// open transactions finish.
    pub fn serves_source(&self) -> bool {
        match self.side() {
            Side::Source => true,
            Side::Holding => self.finishing(),
            Side::Destination | Side::Returning => false,
        }
    }

    /// Whether a connection to the source may send request `api` (`version`, `body`: after its
    /// header) now. On the source side, any. Held while the open transactions finish, only
    /// what they need: their own requests (Produce of transactional batches, AddPartitionsToTxn,
    /// AddOffsetsToTxn, TxnOffsetCommit, EndTxn of an open transaction's producer id), and
    /// ApiVersions, Metadata and FindCoordinator, which change nothing. Otherwise nothing: the
    /// request waits for the switch.
    pub fn admits_to_source(&self, api: ApiKey, version: i16, body: &Bytes) -> bool {
        if self.side() == Side::Source {
            return true;
        }
        if !self.finishing() {
            return false;
        }
        let of_open = |id: i64| self.open().contains_key(&id);
        match api {
            ApiKey::ApiVersions | ApiKey::Metadata | ApiKey::FindCoordinator => true,
            ApiKey::Produce => transactional_batches_of(version, body)
                .is_some_and(|ids| !ids.is_empty() && ids.into_iter().all(of_open)),
            _ => {
                crate::protocol::transactions::producer_of(api, version, body).is_some_and(of_open)
            }
        }
    }
}

/// The producer ids of a Produce request's batches when every one is transactional (`None`: a
/// batch is not, or the request is not readable).
fn transactional_batches_of(version: i16, body: &Bytes) -> Option<Vec<i64>> {
    use crate::protocol::batch::BatchHeader;
    use crate::protocol::produce::{BatchQuestions, ProduceView};
    let view = ProduceView::build(version, body, &mut |_| (None, false), &|_| {
        BatchQuestions::default()
    })
    .ok()?;
    view.partitions
        .iter()
        .map(|p| {
            let b = BatchHeader::parse(p.records?)?;
            b.is_transactional().then_some(b.producer_id)
        })
        .collect()
}
