//! The threads client connections run on: a fixed set of single-threaded runtimes, one OS thread
//! each, that the listeners hand accepted connections to.
//!
//! Why not the process's multi-threaded runtime: there, every request woke a parked worker
//! thread at least once (the task is woken by the I/O driver on one worker, and the scheduler
//! wakes a sibling to look for more work, which finds none and parks again), and half of the
//! gateway's CPU at a moderate load went to that parking and waking (see `docs/benchmarks.md`).
//! On a single-threaded runtime a connection's reads, writes, timers and its two halves'
//! hand-offs stay on one thread: a request costs one wakeup of that thread when its bytes
//! arrive, and none other. Connections are spread over the threads by their live count (the
//! least loaded thread takes the next one), so a few busy connections still use every core.
//!
//! Owns: the threads, their runtimes, the hand-off of a socket from the accepting runtime's
//! reactor to a connection thread's, and the live-connection count per thread. Must not touch:
//! what a connection does (`connection.rs`), accepting (`listener.rs`).
//!
//! Lifecycle: the threads start with [`ConnectionThreads::start`] and stop when the last
//! reference is dropped (each thread's runtime then drops the tasks it still holds: by then the
//! gateway's graceful shutdown has waited for its connections to drain).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Why the connection threads could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ThreadsError {
    #[error("cannot start connection thread {index}: {source}")]
    Spawn {
        index: usize,
        source: std::io::Error,
    },
    #[error("connection thread {index} ended before its runtime was ready")]
    NotReady { index: usize },
    #[error("connection thread {index} cannot build its runtime: {source}")]
    Runtime {
        index: usize,
        source: std::io::Error,
    },
}

struct Worker {
    handle: Handle,
    live: Arc<AtomicUsize>,
    /// Dropped (with the set): the thread's runtime stops.
    _stop: oneshot::Sender<()>,
}

/// A fixed set of single-threaded runtimes serving client connections.
pub struct ConnectionThreads {
    workers: Vec<Worker>,
}

/// Decrements a thread's live count when its connection ends (however it ends).
struct LiveGuard(Arc<AtomicUsize>);
impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConnectionThreads {
    /// Start `n` connection threads (`0`: [`default_count`]), named `{name}-{i}`.
    pub fn start(n: usize, name: &str) -> Result<Arc<Self>, ThreadsError> {
        let n = if n == 0 { default_count() } else { n };
        let mut workers = Vec::with_capacity(n);
        for index in 0..n {
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            std::thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(rt.handle().clone()));
                    // Drives the connections spawned onto this runtime until the set is
                    // dropped (the sender goes away).
                    let _ = rt.block_on(stop_rx);
                })
                .map_err(|source| ThreadsError::Spawn { index, source })?;
            let handle = match ready_rx.recv() {
                Ok(Ok(h)) => h,
                Ok(Err(source)) => return Err(ThreadsError::Runtime { index, source }),
                Err(_) => return Err(ThreadsError::NotReady { index }),
            };
            workers.push(Worker {
                handle,
                live: Arc::new(AtomicUsize::new(0)),
                _stop: stop_tx,
            });
        }
        Ok(Arc::new(ConnectionThreads { workers }))
    }

    /// How many threads there are.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// Never true: a set has at least one thread.
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Live connections per thread, in thread order.
    pub fn live(&self) -> Vec<usize> {
        self.workers
            .iter()
            .map(|w| w.live.load(Ordering::Acquire))
            .collect()
    }

    /// Run the connection `serve` builds on the least loaded thread. `socket` is a tokio socket
    /// registered with the caller's runtime: it is moved to the chosen thread's reactor first
    /// (`serve` gets it back there). A socket that cannot be taken off the caller's reactor is an
    /// error here; one the thread cannot register is logged there, and `serve` is dropped unrun.
    pub fn hand_off<F, Fut>(
        &self,
        socket: tokio::net::TcpStream,
        serve: F,
    ) -> Result<(), std::io::Error>
    where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let worker = self
            .workers
            .iter()
            .min_by_key(|w| w.live.load(Ordering::Acquire))
            .ok_or_else(|| std::io::Error::other("no connection thread"))?;
        let std_socket = socket.into_std()?;
        worker.live.fetch_add(1, Ordering::AcqRel);
        let guard = LiveGuard(worker.live.clone());
        worker.handle.spawn(async move {
            let _guard = guard;
            // Registered with this thread's reactor: from here on every wakeup of the
            // connection is on this thread.
            match tokio::net::TcpStream::from_std(std_socket) {
                Ok(socket) => serve(socket).await,
                Err(e) => tracing::warn!(error = %e, "closing: cannot move the client connection to its thread"),
            }
        });
        Ok(())
    }
}

/// How many connection threads a gateway starts by default: one per core it may use (cgroup
/// quotas count), at least one. Fewer threads wake less often per request when connections are
/// few (the requests of several connections that arrive together are served by one wakeup), but
/// serve simultaneous requests one after the other: measured side by side on 2 cores
/// (`docs/benchmarks.md`, "Fewer wakeups per request"), one thread saved CPU at a moderate load
/// and cost p50 latency, so the default keeps one thread per core and `limits.connection_threads`
/// lets a small, CPU-bound host choose fewer.
pub fn default_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A connected pair: (the accepted side, the client side).
    async fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        (server, client)
    }

    async fn wait_for(threads: &ConnectionThreads, want: Vec<usize>) {
        for _ in 0..200 {
            if threads.live() == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "live connections per thread: {:?}, want {want:?}",
            threads.live()
        );
    }

    #[tokio::test]
    async fn a_handed_off_connection_is_served_on_a_connection_thread() {
        let threads = ConnectionThreads::start(1, "conn-test").unwrap();
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (server, mut client) = pair(&l).await;
        threads
            .hand_off(server, |mut s| async move {
                let name = std::thread::current().name().unwrap_or("").to_string();
                let _ = s.write_all(name.as_bytes()).await;
            })
            .unwrap();
        let mut name = String::new();
        client.read_to_string(&mut name).await.unwrap();
        assert_eq!(name, "conn-test-0");
    }

    #[tokio::test]
    async fn the_least_loaded_thread_takes_the_next_connection_and_ended_ones_are_counted_out() {
        let threads = ConnectionThreads::start(2, "conn-test").unwrap();
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut clients = Vec::new();
        for _ in 0..4 {
            let (server, client) = pair(&l).await;
            clients.push(client);
            // Each connection lives until its client closes.
            threads
                .hand_off(server, |mut s| async move {
                    let mut b = [0u8; 1];
                    let _ = s.read(&mut b).await;
                })
                .unwrap();
        }
        wait_for(&threads, vec![2, 2]).await;
        clients.truncate(1);
        let remaining: usize = {
            for _ in 0..200 {
                if threads.live().iter().sum::<usize>() == 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            threads.live().iter().sum()
        };
        assert_eq!(remaining, 1);
        drop(clients);
        wait_for(&threads, vec![0, 0]).await;
    }

    #[test]
    fn zero_threads_means_the_default_count_and_the_default_is_at_least_one() {
        let threads = ConnectionThreads::start(0, "conn-test").unwrap();
        assert_eq!(threads.len(), default_count());
        assert!(default_count() >= 1);
    }
}
