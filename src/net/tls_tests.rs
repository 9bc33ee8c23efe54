//! Unit tests of `tls.rs`.

use super::*;
use crate::config::ClusterTlsConfig;
use crate::net::{Acceptor, ConnectError, Transport};

/// A self-signed certificate for 127.0.0.1 / localhost with common name `cn`: (cert PEM, key PEM).
fn mint(cn: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn listener_cfg(cert: PathBuf, key: PathBuf) -> ListenerTlsConfig {
    ListenerTlsConfig {
        cert,
        key,
        client_ca: None,
        reload_interval_ms: 100,
    }
}

fn setup_err(cfg: &ListenerTlsConfig) -> TlsSetupError {
    match ServerTls::new(cfg) {
        Ok(_) => panic!("expected a set-up error"),
        Err(e) => e,
    }
}

fn leaf_cn(ck: &CertifiedKey) -> String {
    let (_, c) = x509_parser::parse_x509_certificate(ck.cert[0].as_ref()).unwrap();
    let cn = c
        .subject()
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap()
        .to_string();
    cn
}

#[test]
fn missing_certificate_file_is_named_in_the_error() {
    let f = Files::new();
    let (_, key) = mint("a");
    let cfg = listener_cfg(f.path("nope.pem"), f.write("key.pem", &key));
    let e = setup_err(&cfg);
    assert!(
        matches!(
            e,
            TlsSetupError::Read {
                what: "certificate",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("nope.pem"), "{e}");
}

#[test]
fn empty_certificate_file_has_no_certificate() {
    let f = Files::new();
    let (_, key) = mint("a");
    let cfg = listener_cfg(f.write("cert.pem", ""), f.write("key.pem", &key));
    let e = setup_err(&cfg);
    assert!(matches!(e, TlsSetupError::NoCertificate { .. }), "{e:?}");
    assert!(e.to_string().contains("cert.pem"), "{e}");
}

#[test]
fn key_file_without_a_key_is_rejected() {
    let f = Files::new();
    let (cert, _) = mint("a");
    // A certificate where the key should be.
    let cfg = listener_cfg(f.write("cert.pem", &cert), f.write("key.pem", &cert));
    let e = setup_err(&cfg);
    assert!(matches!(e, TlsSetupError::NoKey { .. }), "{e:?}");
    assert!(e.to_string().contains("key.pem"), "{e}");
}

#[test]
fn certificate_with_the_key_of_another_is_a_mismatch() {
    let f = Files::new();
    let (cert_a, _) = mint("a");
    let (_, key_b) = mint("b");
    let cfg = listener_cfg(f.write("cert.pem", &cert_a), f.write("key.pem", &key_b));
    let e = setup_err(&cfg);
    assert!(matches!(e, TlsSetupError::KeyMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("does not match"), "{e}");
}

#[test]
fn garbage_inside_a_certificate_block_is_a_bad_certificate() {
    let f = Files::new();
    let (_, key) = mint("a");
    let garbage = "-----BEGIN CERTIFICATE-----\nAAAAAAAAAAAA\n-----END CERTIFICATE-----\n";
    let cfg = listener_cfg(f.write("cert.pem", garbage), f.write("key.pem", &key));
    let e = setup_err(&cfg);
    assert!(matches!(e, TlsSetupError::BadCertificate { .. }), "{e:?}");
}

#[test]
fn ca_file_without_certificates_is_rejected() {
    let f = Files::new();
    let (cert, key) = mint("a");
    let mut cfg = listener_cfg(f.write("cert.pem", &cert), f.write("key.pem", &key));
    cfg.client_ca = Some(f.write("ca.pem", "not a CA\n"));
    let e = setup_err(&cfg);
    assert!(
        matches!(e, TlsSetupError::NoCertificate { what: "CA", .. }),
        "{e:?}"
    );
    let client = ClusterTlsConfig {
        ca: Some(f.path("ca.pem")),
        ..ClusterTlsConfig::default()
    };
    let e = ClientTls::new(&client).unwrap_err();
    assert!(e.to_string().contains("ca.pem"), "{e}");
}

#[test]
fn client_certificate_with_a_foreign_key_is_rejected() {
    let f = Files::new();
    let (ca, _) = mint("ca");
    let (cert_a, _) = mint("a");
    let (_, key_b) = mint("b");
    let client = ClusterTlsConfig {
        ca: Some(f.write("ca.pem", &ca)),
        cert: Some(f.write("cert.pem", &cert_a)),
        key: Some(f.write("key.pem", &key_b)),
        server_name: None,
    };
    let e = ClientTls::new(&client).unwrap_err();
    assert!(matches!(e, TlsSetupError::KeyMismatch { .. }), "{e:?}");
}

#[test]
fn changed_files_are_served_and_rejected_files_keep_the_previous_certificate() {
    let f = Files::new();
    let (cert_a, key_a) = mint("cert-a");
    let cfg = listener_cfg(f.write("cert.pem", &cert_a), f.write("key.pem", &key_a));
    let served = ServedCertificate::load(&cfg).unwrap();
    assert!(
        served.check_files().is_none(),
        "unchanged files are not reloaded"
    );

    let (cert_b, key_b) = mint("cert-b");
    f.write("cert.pem", &cert_b);
    f.write("key.pem", &key_b);
    assert!(matches!(served.check_files(), Some(Ok(_))));
    assert_eq!(leaf_cn(&served.current()), "cert-b");
    assert!(served.not_after().is_some());

    f.write("cert.pem", "garbage\n");
    assert!(matches!(
        served.check_files(),
        Some(Err(TlsSetupError::NoCertificate { .. }))
    ));
    assert_eq!(leaf_cn(&served.current()), "cert-b");
    assert!(
        served.check_files().is_none(),
        "a rejected change is reported once"
    );
}

async fn tls_listener(acceptor: Acceptor) -> (String, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut s) = acceptor.accept(tcp).await {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut b = [0u8; 4];
                    if s.read_exact(&mut b).await.is_ok() {
                        let _ = s.write_all(&b).await;
                        let _ = s.flush().await;
                    }
                }
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn a_client_that_never_completes_the_handshake_is_dropped_after_the_timeout() {
    let f = Files::new();
    let (cert, key) = mint("a");
    let mut lcfg = crate::config::load_str(
        "destination: {bootstrap: [\"127.0.0.1:1\"]}\nlisteners: {client: {port_base: 1}}\n",
        "t",
    )
    .unwrap()
    .listeners
    .client;
    lcfg.tls = Some(listener_cfg(
        f.write("c.pem", &cert),
        f.write("k.pem", &key),
    ));
    let acceptor = Acceptor::for_listener(&lcfg)
        .unwrap()
        .with_handshake_timeout(Duration::from_millis(200));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let _silent = TcpStream::connect(addr).await.unwrap();
    let (tcp, _) = l.accept().await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), acceptor.accept(tcp))
        .await
        .expect("accept returns by itself");
    let e = r.err().expect("handshake fails");
    assert_eq!(e.kind(), "tls_handshake_timeout");
}

#[tokio::test]
async fn own_listener_connector_trusts_exactly_the_served_certificate() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let f = Files::new();
    let (cert, key) = mint("served");
    let served_cfg = listener_cfg(f.write("c.pem", &cert), f.write("k.pem", &key));
    let (other_cert, other_key) = mint("other");
    let other_cfg = listener_cfg(
        f.write("oc.pem", &other_cert),
        f.write("ok.pem", &other_key),
    );
    let mine = Acceptor {
        tls: Some(ServerTls::new(&served_cfg).unwrap()),
    };
    let other = Acceptor {
        tls: Some(ServerTls::new(&other_cfg).unwrap()),
    };
    let connector = Transport::to_own_listener(&mine).unwrap();
    let (addr, _t1) = tls_listener(mine).await;
    let (other_addr, _t2) = tls_listener(other).await;

    let mut s = connector
        .connect(&addr, Duration::from_secs(5))
        .await
        .expect("the served certificate is trusted");
    s.write_all(b"ping").await.unwrap();
    s.flush().await.unwrap();
    let mut b = [0u8; 4];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"ping");

    let e = connector
        .connect(&other_addr, Duration::from_secs(5))
        .await
        .err()
        .expect("another certificate is not trusted");
    assert!(matches!(e, ConnectError::Tls { .. }), "{e:?}");
}
