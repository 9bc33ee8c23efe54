//! The peer Kafka proxy of `mirrorgate-bench proxy`: Kroxylicious 0.12.0 (Apache-2.0, Java,
//! Netty) from Maven Central, with no filters, in front of the same destination cluster.
//!
//! Owns: building the launcher (`integration/peer/kroxylicious`: dependencies copied by Maven,
//! one class compiled by `javac`, into `target/peer/kroxylicious/`), its YAML, and the child
//! process. Must not touch: the gateway or the relay.
//!
//! What was tried and why this one (also in docs/benchmarks.md): grepplabs/kafka-proxy (Go) — the Go
//! module proxy answers 403 for every version; `io.kroxylicious:kroxylicious-app` — not served
//! (404), nor `kroxylicious-runtime` after 0.12.0; PyPI has no working Kafka proxy.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::repo;

/// The name reported in the benchmark's JSON.
pub const NAME: &str = "kroxylicious-0.12.0";

fn java() -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|h| PathBuf::from(h).join("bin/java"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("java"))
}

fn javac() -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|h| PathBuf::from(h).join("bin/javac"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("javac"))
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Builds the launcher once (Maven fetches Kroxylicious and its dependencies); returns the
/// Java classpath.
pub fn build() -> Result<String, String> {
    let src = repo().join("integration/peer/kroxylicious");
    let out = repo().join("target/peer/kroxylicious");
    let lib = out.join("lib");
    let classes = out.join("classes");
    let marker = classes.join("mirrorgate/peer/KroxyliciousLauncher.class");
    if !marker.exists() {
        eprintln!("building the peer proxy (Kroxylicious) launcher…");
        run(
            Command::new("mvn")
                .arg("-q")
                .arg("-B")
                .arg("-f")
                .arg(src.join("pom.xml"))
                .arg("org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies")
                .arg(format!("-DoutputDirectory={}", lib.display())),
            "fetching Kroxylicious with Maven",
        )?;
        run(
            Command::new(javac())
                .arg("-d")
                .arg(&classes)
                .arg("-cp")
                .arg(format!("{}/*", lib.display()))
                .arg(src.join("src/main/java/mirrorgate/peer/KroxyliciousLauncher.java")),
            "compiling the Kroxylicious launcher",
        )?;
    }
    Ok(format!("{}:{}/*", classes.display(), lib.display()))
}

/// Kroxylicious as a child process; killed on drop.
pub struct PeerProcess {
    child: Child,
    dir: PathBuf,
    /// The address clients bootstrap from.
    pub bootstrap: String,
}

impl PeerProcess {
    /// Starts Kroxylicious in front of `brokers` (node ids 1, 2, … in that order): bootstrap on
    /// `port`, node n on `port + n`. Waits until the bootstrap port accepts connections.
    pub fn start(classpath: &str, brokers: &[String], port: u16) -> Result<PeerProcess, String> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("mirrorgate-bench-peer-{stamp}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let yaml = format!(
            "virtualClusters:\n\
             \x20 - name: destination\n\
             \x20   targetCluster:\n\
             \x20     bootstrapServers: {}\n\
             \x20   gateways:\n\
             \x20     - name: default\n\
             \x20       portIdentifiesNode:\n\
             \x20         bootstrapAddress: 127.0.0.1:{port}\n\
             \x20         advertisedBrokerAddressPattern: 127.0.0.1\n\
             \x20         nodeStartPort: {}\n\
             \x20         nodeIdRanges: [{{name: brokers, start: 1, end: {}}}]\n",
            brokers.join(","),
            port + 1,
            brokers.len()
        );
        let config = dir.join("kroxylicious.yaml");
        std::fs::write(&config, yaml).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.join("kroxylicious.log")).map_err(|e| e.to_string())?;
        let child = crate::process::die_with_parent(&mut Command::new(java()))
            .arg("-Xms256m")
            .arg("-Xmx512m")
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("-cp")
            .arg(classpath)
            .arg("mirrorgate.peer.KroxyliciousLauncher")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start Kroxylicious: {e}"))?;
        let peer = PeerProcess {
            child,
            dir,
            bootstrap: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                let log =
                    std::fs::read_to_string(peer.dir.join("kroxylicious.log")).unwrap_or_default();
                return Err(format!(
                    "Kroxylicious did not listen on {port} within 60 s: {log}"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(peer)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
