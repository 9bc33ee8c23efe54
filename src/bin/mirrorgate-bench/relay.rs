//! `mirrorgate-bench relay`: the byte-relay floor of the proxy benchmark. A plain TCP relay,
//! one local port per destination broker, that forwards Kafka frames unchanged and rewrites only
//! what clients need to stay on it: the broker addresses in Metadata, FindCoordinator and
//! DescribeCluster responses. No ApiVersions capping, no produce inspection, no metrics, no
//! timeouts: what any Kafka proxy must pay on this machine, and nothing more.
//!
//! Owns: the relay's listeners, its connections and the address rewrite. Must not touch:
//! anything of the gateway (it deliberately shares no code with `mirrorgate::proxy`, so the floor
//! does not move when the gateway changes).
//!
//! Frames are read whole (length prefix included) into one reusable buffer per direction and
//! written with one `write_all`; requests whose responses must be rewritten are remembered by
//! correlation id.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, DescribeClusterResponse, FindCoordinatorResponse, MetadataResponse, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Largest frame the relay accepts (as the gateway's default `max_frame_bytes`).
const MAX_FRAME: usize = 100 * 1024 * 1024;

/// Requests whose responses carry broker addresses, by correlation id: (api key, version).
type Pending = Arc<Mutex<HashMap<i32, (ApiKey, i16)>>>;

/// Node id → the relay's own port for it.
type Ports = Arc<HashMap<i32, u16>>;

/// Runs the relay until the process is killed: node `id` at `upstream` is served on
/// `port_base + i` (i = position in `brokers`).
pub fn serve(port_base: u16, brokers: &[(i32, String)]) -> Result<serde_json::Value, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let ports: Ports = Arc::new(
            brokers
                .iter()
                .enumerate()
                .map(|(i, (id, _))| (*id, port_base + i as u16))
                .collect(),
        );
        let mut tasks = Vec::new();
        for (i, (_, upstream)) in brokers.iter().enumerate() {
            let listener = TcpListener::bind(("127.0.0.1", port_base + i as u16))
                .await
                .map_err(|e| format!("relay cannot bind port {}: {e}", port_base + i as u16))?;
            let upstream = upstream.clone();
            let ports = ports.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let upstream = upstream.clone();
                    let ports = ports.clone();
                    tokio::spawn(async move {
                        if let Err(e) = connection(client, &upstream, ports).await {
                            eprintln!("relay connection to {upstream}: {e}");
                        }
                    });
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        Ok(serde_json::json!({"relay": "stopped"}))
    })
}

async fn connection(client: TcpStream, upstream: &str, ports: Ports) -> Result<(), String> {
    let broker = TcpStream::connect(upstream)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    client.set_nodelay(true).map_err(|e| e.to_string())?;
    broker.set_nodelay(true).map_err(|e| e.to_string())?;
    let (cr, cw) = client.into_split();
    let (br, bw) = broker.into_split();
    let pending: Pending = Arc::default();
    tokio::try_join!(
        requests(cr, bw, pending.clone()),
        responses(br, cw, pending, ports)
    )?;
    Ok(())
}

/// Reads one frame (length prefix included) into `buf`; `Ok(false)` at a clean end of stream.
async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> Result<bool, String> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
        Err(e) => return Err(e.to_string()),
    }
    let n = i32::from_be_bytes(len);
    if n < 4 || n as usize > MAX_FRAME {
        return Err(format!("bad frame length {n}"));
    }
    buf.clear();
    buf.extend_from_slice(&len);
    buf.resize(4 + n as usize, 0);
    r.read_exact(&mut buf[4..])
        .await
        .map_err(|e| e.to_string())?;
    Ok(true)
}

async fn requests<R, W>(r: R, mut w: W, pending: Pending) -> Result<(), String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut buf = Vec::with_capacity(64 * 1024);
    while read_frame(&mut r, &mut buf).await? {
        if buf.len() >= 12 {
            let key = i16::from_be_bytes([buf[4], buf[5]]);
            if matches!(key, 3 | 10 | 60) {
                let version = i16::from_be_bytes([buf[6], buf[7]]);
                let correlation = i32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
                if let Ok(api) = ApiKey::try_from(key) {
                    if let Ok(mut p) = pending.lock() {
                        p.insert(correlation, (api, version));
                    }
                }
            }
        }
        w.write_all(&buf).await.map_err(|e| e.to_string())?;
    }
    let _ = w.shutdown().await;
    Ok(())
}

async fn responses<R, W>(r: R, mut w: W, pending: Pending, ports: Ports) -> Result<(), String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut buf = Vec::with_capacity(64 * 1024);
    while read_frame(&mut r, &mut buf).await? {
        let wanted = if buf.len() >= 8 {
            let correlation = i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
            pending
                .lock()
                .ok()
                .and_then(|mut p| (!p.is_empty()).then(|| p.remove(&correlation)).flatten())
        } else {
            None
        };
        match wanted {
            Some((api, version)) => {
                let frame = rewrite(api, version, &buf[4..], &ports)?;
                w.write_all(&frame).await
            }
            None => w.write_all(&buf).await,
        }
        .map_err(|e| e.to_string())?;
    }
    let _ = w.shutdown().await;
    Ok(())
}

fn set_address(node: i32, host: &mut StrBytes, port: &mut i32, ports: &HashMap<i32, u16>) {
    if let Some(p) = ports.get(&node) {
        *host = StrBytes::from_static_str("127.0.0.1");
        *port = i32::from(*p);
    }
}

/// The response `body` (header and message, no length prefix) with broker addresses pointed at
/// the relay, as a frame with its length prefix.
fn rewrite(
    api: ApiKey,
    version: i16,
    body: &[u8],
    ports: &HashMap<i32, u16>,
) -> Result<Vec<u8>, String> {
    let header_version = api.response_header_version(version);
    let mut b = Bytes::copy_from_slice(body);
    let header = ResponseHeader::decode(&mut b, header_version).map_err(|e| e.to_string())?;
    let mut out = BytesMut::with_capacity(body.len() + 64);
    out.put_i32(0);
    header
        .encode(&mut out, header_version)
        .map_err(|e| e.to_string())?;
    let encoded = match api {
        ApiKey::Metadata => {
            let mut m = MetadataResponse::decode(&mut b, version).map_err(|e| e.to_string())?;
            for br in m.brokers.iter_mut() {
                set_address(br.node_id.0, &mut br.host, &mut br.port, ports);
            }
            m.encode(&mut out, version)
        }
        ApiKey::FindCoordinator => {
            let mut m =
                FindCoordinatorResponse::decode(&mut b, version).map_err(|e| e.to_string())?;
            if version < 4 {
                let node = m.node_id.0;
                set_address(node, &mut m.host, &mut m.port, ports);
            }
            for c in m.coordinators.iter_mut() {
                set_address(c.node_id.0, &mut c.host, &mut c.port, ports);
            }
            m.encode(&mut out, version)
        }
        ApiKey::DescribeCluster => {
            let mut m =
                DescribeClusterResponse::decode(&mut b, version).map_err(|e| e.to_string())?;
            for br in m.brokers.iter_mut() {
                set_address(br.broker_id.0, &mut br.host, &mut br.port, ports);
            }
            m.encode(&mut out, version)
        }
        other => return Err(format!("relay does not rewrite {other:?}")),
    };
    encoded.map_err(|e| format!("{api:?} v{version}: {e}"))?;
    let len = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(out.to_vec())
}

/// The relay as a child process of the benchmark (this executable, `relay` subcommand); killed
/// on drop.
pub struct RelayProcess {
    child: Child,
}

impl RelayProcess {
    /// Starts the relay for `brokers` (node ids 1, 2, … in the order given) on
    /// `port_base`, `port_base + 1`, … and waits until its first port accepts connections.
    pub fn start(port_base: u16, brokers: &[String]) -> Result<RelayProcess, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let spec: Vec<String> = brokers
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect();
        let child = crate::process::die_with_parent(&mut Command::new(exe))
            .arg("relay")
            .arg("--port-base")
            .arg(port_base.to_string())
            .arg("--brokers")
            .arg(spec.join(","))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the relay: {e}"))?;
        let relay = RelayProcess { child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port_base)).is_err() {
            if Instant::now() > deadline {
                return Err(format!("relay did not listen on {port_base} within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(relay)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses `1=127.0.0.1:29092,2=127.0.0.1:29094`.
pub fn parse_brokers(spec: &str) -> Result<Vec<(i32, String)>, String> {
    spec.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (id, addr) = s
                .split_once('=')
                .ok_or_else(|| format!("`{s}`: expected NODE_ID=HOST:PORT"))?;
            let id = id
                .parse()
                .map_err(|_| format!("`{s}`: node id is not a number"))?;
            Ok((id, addr.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use kafka_protocol::messages::BrokerId;

    #[test]
    fn metadata_brokers_are_pointed_at_the_relay_ports() {
        let header = ResponseHeader::default().with_correlation_id(7);
        let resp = MetadataResponse::default().with_brokers(vec![
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("broker-1.internal"))
                .with_port(29092),
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(9))
                .with_host(StrBytes::from_static_str("unknown"))
                .with_port(1),
        ]);
        let version = 12;
        let hv = ApiKey::Metadata.response_header_version(version);
        let mut body = BytesMut::new();
        header.encode(&mut body, hv).unwrap();
        resp.encode(&mut body, version).unwrap();
        let ports = HashMap::from([(1, 17192u16)]);
        let frame = rewrite(ApiKey::Metadata, version, &body, &ports).unwrap();
        assert_eq!(
            i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize,
            frame.len() - 4
        );
        let mut b = Bytes::copy_from_slice(&frame[4..]);
        assert_eq!(
            ResponseHeader::decode(&mut b, hv).unwrap().correlation_id,
            7
        );
        let out = MetadataResponse::decode(&mut b, version).unwrap();
        assert_eq!(
            (out.brokers[0].host.as_str(), out.brokers[0].port),
            ("127.0.0.1", 17192)
        );
        assert_eq!(
            (out.brokers[1].host.as_str(), out.brokers[1].port),
            ("unknown", 1),
            "a node the relay does not serve is left alone"
        );
    }

    #[test]
    fn broker_specs_are_parsed_and_bad_ones_named() {
        assert_eq!(
            parse_brokers("1=127.0.0.1:29092,2=127.0.0.1:29094").unwrap(),
            vec![(1, "127.0.0.1:29092".into()), (2, "127.0.0.1:29094".into())]
        );
        assert!(parse_brokers("x=127.0.0.1:1")
            .unwrap_err()
            .contains("not a number"));
        assert!(parse_brokers("127.0.0.1:1")
            .unwrap_err()
            .contains("NODE_ID"));
    }
}
