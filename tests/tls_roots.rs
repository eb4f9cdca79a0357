//! Outbound HTTPS trusts the system's certificate store besides the built-in roots: a model
//! server whose certificate comes from a private authority is reached once that authority is in
//! `SSL_CERT_FILE`, as an operator adds a company CA (in a container too).

mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use testkit::fake_llm::{FakeLlm, Reply};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;

/// A private authority and a certificate it signed for `localhost` and 127.0.0.1.
fn private_authority() -> (String, rustls::ServerConfig) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "agentdesk test authority");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    (ca.pem(), config)
}

/// Terminates TLS on a free port and passes the bytes on to `upstream`; returns the port.
async fn tls_front(config: rustls::ServerConfig, upstream: std::net::SocketAddr) -> u16 {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn a_model_server_signed_by_a_private_authority_is_trusted_through_ssl_cert_file() {
    let llm = FakeLlm::start().await;
    llm.set_reply(Reply::tool_call("close_ticket", json!({ "result": "over TLS" })));
    let (ca_pem, server_config) = private_authority();
    let tls_port = tls_front(server_config, llm.addr()).await;
    let dir = tempfile_dir();
    let ca_file = dir.join("company-ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();

    let database_url = testkit::testing::fresh_database().await.unwrap();
    let port = support::free_port();
    let _child = support::KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_agentdesk"))
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", &database_url)
            .env("OPENAI_BASE_URL", format!("https://localhost:{tls_port}/v1"))
            .env("OPENAI_API_KEY", "test")
            .env("SSL_CERT_FILE", &ca_file)
            .env("AGENTDESK_ADDR", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the agentdesk binary"),
    );
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    support::wait_ready(&client, &base, Duration::from_secs(30)).await;

    let ticket = support::create_ticket_at(&client, &base, json!({"task": "over TLS, please"})).await;
    let key = ticket["key"].as_str().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let ticket = support::wait_status_at(&client, &base, key, "done", deadline).await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(ticket["status"], "done", "{ticket}");
    assert_eq!(ticket["result"], "over TLS");
    assert!(llm.request_count() >= 1);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agentdesk-tls-roots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
