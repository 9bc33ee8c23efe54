//! One client connection and its upstream connection to one destination broker.
//!
//! A connection is one task on one connection thread ([`super::threads`]); its two halves are
//! two futures of that task, polled concurrently (neither direction may wait for the other: a
//! broker that cannot write a large answer stops reading requests). So handing a request's
//! in-flight entry to the response half wakes nothing but the task itself, on its own thread.
//! The halves:
//! - **requests** (client → broker): read a frame, validate the header, begin its per-API
//!   exchange ([`super::exchange::begin`]: forward, or answer locally), note the request in the
//!   in-flight queue (unless it is an `acks=0` Produce, which gets no response), forward;
//! - **responses** (broker → client): for each in-flight request in order, read the broker's
//!   response, check its correlation id, finish the exchange ([`super::exchange::Pending::finish`]:
//!   PSM tap, enforcement merges, address rewrite), write the result to the client.
//!
//! Owns: the two halves, the in-flight queue, timeouts, connection-level errors. Must not touch:
//! what an API's request or response means (the exchanges), the decisions.
//!
//! The in-flight queue is bounded (`limits.max_in_flight`): when it is full the gateway stops
//! reading from the client, and when the client stops reading responses the gateway stops
//! reading from the broker. So each connection buffers at most one frame per direction.
//!
//! Bad input (oversized, truncated or unparsable frame, unknown api key, unsupported version)
//! closes this connection with a logged reason; other connections are unaffected.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use crate::metrics::{ListenerKind, Metrics};
use crate::net::{ReadHalf, Stream, WriteHalf};
use crate::protocol::frame::{
    parse_request_header, read_frame, response_correlation_id, FrameError,
};
use crate::protocol::produce::peek_acks;
use crate::protocol::versions;

use super::close::Refused;
use super::context::ConnContext;
use super::exchange::{self, Step};

/// How the request half ended without an error.
enum End {
    ClientClosed,
    Idle,
    Shutdown,
    /// Principal limits refused the client (an answer may still be queued).
    Refused(super::sasl::Refusal),
    /// Mirror writes admitted by this request may no longer be sent (why): it was not sent,
    /// and the connection is closed so the producer retries elsewhere or later.
    AdmissionLapsed(String),
    /// A forward listener's route left this connection's side: its requests in flight are
    /// answered and the client connection moves to the other side's upstream.
    Switched,
    /// A request holding admitted mirror writes was still being written to the broker when the
    /// lease ended (why): the broker connection is closed at once, part-sent, and every write
    /// in flight on it ends with an unknown outcome (review G1).
    SendCut(String),
}

struct InFlight {
    correlation_id: i32,
    api: ApiKey,
    started: Instant,
    /// What the response needs (the per-API exchange's pending state).
    pending: exchange::Pending,
    /// A response the gateway answers itself; nothing was sent upstream.
    local: Option<Bytes>,
}

/// Decrements a gauge when dropped.
pub(super) struct GaugeGuard(pub(super) prometheus::IntGauge);
impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A client connection's two halves and the bytes read from it but not yet used: what a forward
/// listener's connection keeps across a switch of its upstream.
pub struct ClientConn {
    rd: ReadHalf,
    wr: WriteHalf,
    buf: BytesMut,
}

impl ClientConn {
    pub fn new(client: Stream) -> ClientConn {
        let (rd, wr) = client.into_split();
        ClientConn {
            rd,
            wr,
            buf: BytesMut::with_capacity(64 * 1024),
        }
    }

    /// Resolves when the client closes its connection (or it fails) while no upstream serves
    /// it (a forward connection waiting for a switch). What the client sends meanwhile is kept,
    /// after what was carried, up to `limit` bytes; beyond that it is not read (the client's
    /// writes then wait in its socket, as they would for a slow broker).
    pub async fn closed(&mut self, limit: usize) {
        use tokio::io::AsyncReadExt;
        loop {
            if self.buf.len() >= limit {
                std::future::pending::<()>().await;
            }
            self.buf.reserve(16 * 1024);
            // Cancel-safe: what one read returns is in the buffer when the read completes.
            match self.rd.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }
}

/// Serve one accepted client connection for broker `node_id` until it ends (closed when its
/// upstream cannot be reached: the client connects again).
/// `_drain` is held until the connection is fully closed (graceful shutdown waits for it).
pub async fn serve(
    ctx: Arc<ConnContext>,
    client: Stream,
    peer: SocketAddr,
    node_id: i32,
    shutdown: watch::Receiver<bool>,
    drain: mpsc::Sender<()>,
) {
    let _ = serve_until_switch(
        ctx,
        ClientConn::new(client),
        peer,
        node_id,
        shutdown,
        None,
        drain,
    )
    .await;
}

/// How serving a client connection with one upstream ended.
pub enum Served {
    /// The connection was closed: by the client, an error, shutdown, or a client that
    /// authenticated with SASL, whose new upstream would not know it.
    Closed,
    /// The route switched sides: the client connection, to be served by the other side.
    Switched(ClientConn),
    /// The upstream broker could not be reached: the client connection, nothing read from it.
    Unreachable(ClientConn),
}

/// Serve a client connection with `ctx`'s upstream until it ends, or until `switch` fires (a
/// forward listener's route changed sides): then no new request is read, the requests in
/// flight are answered, and the client connection is handed back to be served by the other
/// side's upstream (see [`Served`]).
pub async fn serve_until_switch(
    ctx: Arc<ConnContext>,
    client: ClientConn,
    peer: SocketAddr,
    node_id: i32,
    shutdown: watch::Receiver<bool>,
    switch: Option<watch::Receiver<bool>>,
    _drain: mpsc::Sender<()>,
) -> Served {
    let span = tracing::info_span!("conn", listener = ctx.kind.as_str(), %peer, node = node_id);
    run(ctx, client, node_id, shutdown, switch)
        .instrument(span)
        .await
}

async fn run(
    ctx: Arc<ConnContext>,
    client: ClientConn,
    node_id: i32,
    mut shutdown: watch::Receiver<bool>,
    switch: Option<watch::Receiver<bool>>,
) -> Served {
    let kind = ctx.kind;
    let Some(addr) = ctx.cluster.broker_addr(node_id) else {
        tracing::warn!("closing: no upstream broker with node id {node_id} is known");
        ctx.metrics.error(kind, "unknown_broker");
        return Served::Closed;
    };
    // The client authenticates itself through this connection (SASL passthrough): the
    // gateway's own credentials are never used on it.
    let upstream = match ctx
        .cluster
        .connector()
        .for_passthrough()
        .connect(&addr, ctx.connect_timeout)
        .await
    {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot connect to the upstream broker");
            ctx.metrics.error(kind, e.kind());
            return Served::Unreachable(client);
        }
    };
    let node_label = node_id.to_string();
    ctx.metrics
        .upstream_connections_total
        .with_label_values(&[&node_label])
        .inc();
    let gauge = ctx
        .metrics
        .upstream_connections
        .with_label_values(&[&node_label]);
    gauge.inc();
    let _upstream_guard = GaugeGuard(gauge);
    tracing::debug!(upstream = %addr, "connected");

    let ClientConn {
        rd: mut client_rd_own,
        wr: mut client_wr_own,
        buf: mut request_buf,
    } = client;
    let (client_rd, client_wr, carried) =
        (&mut client_rd_own, &mut client_wr_own, &mut request_buf);
    // The client authenticated through this connection: a switched upstream would not know it.
    let authenticated = std::sync::atomic::AtomicBool::new(false);
    let authenticated_ref = &authenticated;
    let (mut up_rd, mut up_wr) = upstream.into_split();
    let (tx, mut rx) = mpsc::channel::<InFlight>(ctx.limits.max_in_flight.max(1));
    let pending = Arc::new(AtomicUsize::new(0));
    let max_request = ctx.limits.max_frame_bytes;
    let max_response = ctx.limits.max_frame_bytes.max(256 * 1024 * 1024);
    let idle = Duration::from_millis(ctx.limits.idle_timeout_ms);
    let upstream_timeout = Duration::from_millis(ctx.limits.upstream_timeout_ms);

    let requests = {
        let ctx = ctx.clone();
        let pending = pending.clone();
        let addr = addr.clone();
        async move {
            let buf = carried;
            let mut sasl_guard = ctx
                .principal_limits
                .clone()
                .map(super::sasl::SaslGuard::new);
            // One idle timer for the connection, moved later before each read. Moving a timer
            // later only updates its deadline (tokio re-files it when the old one comes);
            // a fresh timer per read would be filed in the runtime's wheel each time and, being
            // earlier than the wheel's next wake, wake the runtime's driver once per request.
            let idle_timer = tokio::time::sleep(idle);
            tokio::pin!(idle_timer);
            let shutdown_signal = shutdown.changed();
            tokio::pin!(shutdown_signal);
            let mut switch = switch;
            let switch_signal = async move {
                match switch.as_mut() {
                    Some(s) => {
                        let _ = s.wait_for(|switched| *switched).await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::pin!(switch_signal);
            loop {
                idle_timer
                    .as_mut()
                    .reset(tokio::time::Instant::now() + idle);
                let read = tokio::select! {
                    biased;
                    _ = &mut shutdown_signal => return Ok(End::Shutdown),
                    _ = &mut switch_signal => return Ok(End::Switched),
                    r = read_frame(client_rd, buf, max_request) => Some(r),
                    _ = &mut idle_timer => None,
                };
                let frame: Bytes = match read {
                    None if pending.load(Ordering::Acquire) == 0 => return Ok(End::Idle),
                    None => continue,
                    Some(Ok(None)) => return Ok(End::ClientClosed),
                    Some(Ok(Some(f))) => f,
                    Some(Err(e)) => return Err(Refused::Frame(e)),
                };
                let body = &frame[4..];
                let h = parse_request_header(body)?;
                if matches!(h.api_key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) {
                    authenticated_ref.store(true, Ordering::Relaxed);
                }
                if !versions::accepts(h.api_key, h.api_version) {
                    return Err(Refused::UnsupportedVersion {
                        api: h.api_key,
                        version: h.api_version,
                    });
                }
                // A forward listener held for a switchover: what may not go to the source waits
                // for the switch, first in what the connection reads next.
                if let Some(route) = ctx.forward_to_source() {
                    let after_header = frame.slice(4 + h.header_len..);
                    if !route.admits_to_source(h.api_key, h.api_version, &after_header) {
                        super::forward::put_back(buf, &frame);
                        return Ok(End::Switched);
                    }
                }
                // Read once: whether an answer comes, and (mirror listener) whether it may.
                let acks = if h.api_key == ApiKey::Produce {
                    Some(peek_acks(h.api_version, &body[h.header_len..])?)
                } else {
                    None
                };
                let expects_response = acks != Some(0);
                ctx.handles.request(h.api_key);
                ctx.handles.bytes_in.inc_by(frame.len() as u64);
                let started = Instant::now();
                if let Some(guard) = sasl_guard.as_mut() {
                    use super::sasl::Verdict;
                    match guard.on_request(&h, &frame) {
                        Verdict::Forward => {}
                        Verdict::Close(refusal) => return Ok(End::Refused(refusal)),
                        Verdict::AnswerAndClose { response, refusal } => {
                            pending.fetch_add(1, Ordering::AcqRel);
                            let answer = InFlight {
                                correlation_id: h.correlation_id,
                                api: h.api_key,
                                started,
                                pending: exchange::Pending::plain(&h),
                                local: Some(response),
                            };
                            let _ = tx.send(answer).await;
                            return Ok(End::Refused(refusal));
                        }
                    }
                }
                let (step, pending_exchange) = exchange::begin(&ctx, &h, acks, frame)?;
                let (forward, local) = match step {
                    Step::Forward(f) => (Some(f), None),
                    Step::Answer(a) => (None, Some(a)),
                    Step::Nothing => (None, None),
                };
                // A send of admitted mirror writes must end while the lease holds (review G1):
                // a write blocked on a full socket past it is not finished later.
                let send_bound = if forward.is_some() && pending_exchange.holds_mirror_writes() {
                    ctx.mirrors.as_ref().and_then(|m| m.mirror_send_deadline())
                } else {
                    None
                };
                if expects_response && (forward.is_some() || local.is_some()) {
                    // A slot in the response queue first: waiting for it is the last wait
                    // before the send, so the mirror writes' admission is checked after it.
                    let Ok(slot) = tx.reserve().await else {
                        // The response half has ended; it reports why. Nothing was sent.
                        pending_exchange.release_unsent();
                        return Ok(End::ClientClosed);
                    };
                    if let Some(why) = lapsed_admission(&ctx, &pending_exchange, forward.is_some())
                    {
                        pending_exchange.release_unsent();
                        return Ok(End::AdmissionLapsed(why));
                    }
                    if let Some(f) = forward.as_ref().filter(|_| ctx.source_refused()) {
                        pending_exchange.release_unsent();
                        super::forward::put_back(buf, f);
                        return Ok(End::Switched);
                    }
                    pending.fetch_add(1, Ordering::AcqRel);
                    slot.send(InFlight {
                        correlation_id: h.correlation_id,
                        api: h.api_key,
                        started,
                        pending: pending_exchange,
                        local,
                    });
                }
                if let Some(frame) = forward {
                    if !expects_response && ctx.source_refused() {
                        super::forward::put_back(buf, &frame);
                        return Ok(End::Switched);
                    }
                    // Flush: a TLS stream may hold written bytes until flushed.
                    let send = async {
                        match up_wr.write_all(&frame).await {
                            Ok(()) => up_wr.flush().await,
                            Err(e) => Err(e),
                        }
                    };
                    let sent = match send_bound {
                        None => send.await,
                        Some(bound) => match tokio::time::timeout(bound, send).await {
                            Ok(sent) => sent,
                            // The broker connection is closed with the request part-sent: the
                            // broker never reads a whole frame of it. Its in-flight guards end
                            // without an answer (unknown outcome, settled by a failover).
                            Err(_) => {
                                return Ok(End::SendCut(
                                    "the lease on the state topic ended while admitted mirror writes were still being written to the broker".into(),
                                ))
                            }
                        },
                    };
                    sent.map_err(|source| Refused::Upstream {
                        addr: addr.clone(),
                        source,
                    })?;
                }
            }
        }
    };

    let responses = {
        let ctx = ctx.clone();
        let addr = addr.clone();
        async move {
            let mut buf = BytesMut::with_capacity(64 * 1024);
            // Once the client is gone, answers are still read from the broker (and dropped):
            // the outcome of the mirror writes in flight is known only from them.
            let mut client_gone: Option<std::io::Error> = None;
            // One timer for the oldest request's answer, moved to each request's deadline in
            // turn (deadlines only grow: requests are answered in order). As for the idle
            // timer, moving it later files nothing in the runtime's timer wheel.
            let answer_timer = tokio::time::sleep(upstream_timeout);
            tokio::pin!(answer_timer);
            while let Some(inf) = rx.recv().await {
                if let Some(local) = inf.local {
                    if client_gone.is_none() {
                        if let Err(e) = write_out(client_wr, &local).await {
                            client_gone = Some(e);
                        }
                    }
                    pending.fetch_sub(1, Ordering::AcqRel);
                    ctx.handles.bytes_out.inc_by(local.len() as u64);
                    ctx.handles
                        .latency(inf.api, inf.started.elapsed().as_secs_f64());
                    continue;
                }
                let read = read_frame(&mut up_rd, &mut buf, max_response);
                let read = if inf.api == ApiKey::JoinGroup {
                    read.await
                } else {
                    answer_timer.as_mut().reset(tokio::time::Instant::from_std(
                        inf.started + upstream_timeout,
                    ));
                    tokio::select! {
                        biased;
                        r = read => r,
                        _ = &mut answer_timer => return Err(Refused::UpstreamTimeout {
                            addr: addr.clone(),
                            api: inf.api,
                            after: upstream_timeout,
                        }),
                    }
                };
                let frame = read
                    .map_err(|e| match e {
                        FrameError::Io(source) => Refused::Upstream {
                            addr: addr.clone(),
                            source,
                        },
                        FrameError::Truncated { .. } => Refused::UpstreamClosed(addr.clone()),
                        other => Refused::Frame(other),
                    })?
                    .ok_or_else(|| Refused::UpstreamClosed(addr.clone()))?;
                let got = response_correlation_id(&frame[4..])?;
                if got != inf.correlation_id {
                    return Err(Refused::Correlation {
                        got,
                        want: inf.correlation_id,
                    });
                }
                let out = inf.pending.finish(&ctx, &addr, frame).await?;
                if client_gone.is_none() {
                    if let Err(e) = write_out(client_wr, &out).await {
                        client_gone = Some(e);
                    }
                }
                pending.fetch_sub(1, Ordering::AcqRel);
                ctx.handles.bytes_out.inc_by(out.len() as u64);
                ctx.handles
                    .latency(inf.api, inf.started.elapsed().as_secs_f64());
            }
            if let Some(e) = client_gone {
                return Err(Refused::ClientGone(e));
            }
            Ok::<(), Refused>(())
        }
    };

    let switched = {
        tokio::pin!(requests);
        tokio::pin!(responses);
        tokio::select! {
            r = &mut responses => {
                if let Err(e) = r {
                    log_close(&ctx.metrics, kind, &e);
                }
                false
            }
            r = &mut requests => {
                // On the mirror listener the broker's answers are awaited as long as a request may
                // take, whatever ended the client side: until they come, the failover drain cannot
                // know whether the mirror writes among them will be appended.
                let drain_ms = if kind == ListenerKind::Mirror {
                    ctx.limits.shutdown_grace_ms.max(ctx.limits.upstream_timeout_ms)
                } else {
                    ctx.limits.shutdown_grace_ms
                };
                let mut grace = Duration::from_millis(drain_ms);
                let mut switched = false;
                match r {
                    Ok(End::Idle) => tracing::info!("closing idle connection"),
                    Ok(End::Shutdown) => {
                        tracing::debug!("draining for shutdown");
                        grace = Duration::from_millis(ctx.limits.shutdown_grace_ms);
                    }
                    Ok(End::Switched) => {
                        tracing::debug!("the forward route left this side: answering the requests in flight, then moving the connection");
                        grace = upstream_timeout;
                        switched = true;
                    }
                    Ok(End::ClientClosed) => tracing::debug!("client closed"),
                    Ok(End::Refused(r)) => {
                        tracing::warn!(reason = %r, "closing connection");
                        ctx.metrics.error(kind, r.kind());
                    }
                    Ok(End::AdmissionLapsed(why)) => {
                        tracing::warn!(reason = %why, "admitted mirror writes not sent: the admission lapsed before the send; closing the connection");
                        ctx.metrics.error(kind, "admission_lapsed");
                    }
                    Ok(End::SendCut(why)) => {
                        // Not drained: the broker connection closes now (its answers, and the
                        // guards waiting for them, are dropped: unknown outcomes).
                        tracing::warn!(reason = %why, "closing the connection and its broker connection part-sent");
                        ctx.metrics.error(kind, "admission_lapsed");
                        return Served::Closed;
                    }
                    Err(e) => {
                        log_close(&ctx.metrics, kind, &e);
                        if kind != ListenerKind::Mirror {
                            return Served::Closed;
                        }
                    }
                }
                match tokio::time::timeout(grace, responses).await {
                    Ok(Ok(())) => switched,
                    Ok(Err(e)) => {
                        log_close(&ctx.metrics, kind, &e);
                        false
                    }
                    Err(_) => {
                        tracing::warn!("in-flight requests not answered within the grace period; closing");
                        ctx.metrics.error(kind, "drain_timeout");
                        false
                    }
                }
            }
        }
    };
    if switched && !authenticated.load(Ordering::Relaxed) {
        return Served::Switched(ClientConn {
            rd: client_rd_own,
            wr: client_wr_own,
            buf: request_buf,
        });
    }
    if switched {
        tracing::info!("closing: the client authenticated with SASL on the old upstream; it reconnects and authenticates with the new one");
    }
    let _ = client_wr_own.shutdown().await;
    Served::Closed
}

/// Why the mirror writes `pending` holds may not be sent now (`None`: they may, or it holds none,
/// or nothing is `forwarded`). Asked right before the send: a pause or a lost state topic
/// between the admission and the send must not let them reach the broker after another
/// instance waited this one out and wrote its barriers.
fn lapsed_admission(
    ctx: &ConnContext,
    pending: &exchange::Pending,
    forwarded: bool,
) -> Option<String> {
    if !forwarded || !pending.holds_mirror_writes() {
        return None;
    }
    ctx.mirrors.as_ref()?.admitted_mirror_writes_lapsed()
}

/// Write one whole frame to the client and flush it (a TLS stream may hold written bytes).
async fn write_out<W: AsyncWrite + Unpin>(w: &mut W, frame: &[u8]) -> std::io::Result<()> {
    w.write_all(frame).await?;
    w.flush().await
}

fn log_close(metrics: &Metrics, kind: ListenerKind, e: &Refused) {
    match e {
        Refused::ClientGone(_) => tracing::debug!(reason = %e, "closing connection"),
        _ => tracing::warn!(reason = %e, "closing connection"),
    }
    metrics.error(kind, e.kind());
}
