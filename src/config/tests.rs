use super::*;

#[test]
fn the_built_in_providers_are_read_with_the_rest_of_the_configuration() {
    let c = Config::from_lookup(|n| match n {
        "OPENAI_BASE_URL" => Some(" http://127.0.0.1:8081/v1 ".to_owned()),
        "ANTHROPIC_API_KEY" => Some(String::new()),
        _ => None,
    })
    .unwrap();
    assert!(c.openai.is_configured());
    assert_eq!(c.openai.base_url.as_deref(), Some("http://127.0.0.1:8081/v1"));
    assert_eq!(c.openai.api_key, None);
    assert!(!c.anthropic.is_configured(), "a blank key is no key");
    let c = Config::from_lookup(|n| (n == "ANTHROPIC_API_KEY").then(|| "sk-ant".to_owned())).unwrap();
    assert!(c.anthropic.is_configured() && !c.openai.is_configured());
    assert!(!c.openai.http2 && !c.anthropic.http2, "HTTP/1.1 unless asked for");
    let c = Config::from_lookup(|n| (n == "AGENTDESK_OPENAI_HTTP2").then(|| "true".to_owned())).unwrap();
    assert!(c.openai.http2 && !c.anthropic.http2);
    let err = Config::from_lookup(|n| (n == "AGENTDESK_ANTHROPIC_HTTP2").then(|| "h2c".to_owned())).unwrap_err();
    assert!(err.contains("AGENTDESK_ANTHROPIC_HTTP2"), "{err}");
}

#[test]
fn the_public_url_is_an_http_address() {
    let c =
        Config::from_lookup(|n| (n == "AGENTDESK_PUBLIC_URL").then(|| "https://desk.example.com/".to_owned())).unwrap();
    assert_eq!(c.public_url.as_deref(), Some("https://desk.example.com"));
    for bad in ["desk.example.com", "ftp://desk", "https://desk/?a=1"] {
        let err = Config::from_lookup(|n| (n == "AGENTDESK_PUBLIC_URL").then(|| bad.to_owned())).unwrap_err();
        assert!(err.contains("AGENTDESK_PUBLIC_URL"), "{bad}: {err}");
    }
}

#[test]
fn config_reads_the_contract_variables() {
    let env = |name: &str| {
        match name {
            "AGENTDESK_ADDR" => Some("127.0.0.1:0"),
            "AGENTDESK_WORKERS" => Some("8"),
            "AGENTDESK_LEASE_SECS" => Some("5"),
            "AGENTDESK_API_TOKENS" => Some("a, b,,"),
            "AGENTDESK_LOG_FORMAT" => Some("json"),
            "AGENTDESK_ALLOW_PRIVATE_URLS" => Some("true"),
            _ => None,
        }
        .map(str::to_owned)
    };
    let c = Config::from_lookup(env).unwrap();
    assert_eq!(c.addr.port(), 0);
    assert_eq!(c.workers, 8);
    assert_eq!(c.lease, Duration::from_secs(5));
    assert_eq!(c.api_tokens, vec!["a", "b"]);
    assert_eq!(c.log_format, LogFormat::Json);
    assert_eq!(c.stream_idle, Duration::from_secs(90));
    assert!(c.allow_private_urls);
    assert!(!format!("{c:?}").contains("\"a\""), "tokens are not printed");
}

#[test]
fn config_rejects_malformed_values_naming_the_variable() {
    let err = Config::from_lookup(|n| (n == "AGENTDESK_WORKERS").then(|| "many".to_owned())).unwrap_err();
    assert!(err.contains("AGENTDESK_WORKERS"));
    let err = Config::from_lookup(|n| (n == "AGENTDESK_LEASE_SECS").then(|| "-1".to_owned())).unwrap_err();
    assert!(err.contains("AGENTDESK_LEASE_SECS"));
    let err = Config::from_lookup(|n| (n == "AGENTDESK_ALLOW_PRIVATE_URLS").then(|| "maybe".to_owned())).unwrap_err();
    assert!(err.contains("AGENTDESK_ALLOW_PRIVATE_URLS"));
}

#[test]
fn webhook_settings_are_read() {
    let d = Config::from_lookup(|_| None).unwrap();
    assert_eq!(d.webhook_retry.len(), 7);
    assert_eq!(d.webhook_retry[1], Duration::from_secs(300));
    assert_eq!(d.webhook_timeout, Duration::from_secs(15));
    assert!(!d.allow_private_urls);
    let env = |name: &str| {
        match name {
            "AGENTDESK_WEBHOOK_RETRY_SECS" => Some("1, 0.5,2"),
            "AGENTDESK_WEBHOOK_TIMEOUT_SECS" => Some("3"),
            "AGENTDESK_ALLOW_PRIVATE_URLS" => Some("true"),
            _ => None,
        }
        .map(str::to_owned)
    };
    let c = Config::from_lookup(env).unwrap();
    assert_eq!(c.webhook_retry, [1000, 500, 2000].map(Duration::from_millis));
    assert_eq!(c.webhook_timeout, Duration::from_secs(3));
    assert!(c.allow_private_urls);
    let err = Config::from_lookup(|n| (n == "AGENTDESK_WEBHOOK_RETRY_SECS").then(|| "5,x".to_owned())).unwrap_err();
    assert!(err.contains("AGENTDESK_WEBHOOK_RETRY_SECS"), "{err}");
    let err = Config::from_lookup(|n| (n == "AGENTDESK_METRICS_ADDR").then(|| ":9090".to_owned())).unwrap_err();
    assert!(err.contains("AGENTDESK_METRICS_ADDR"));
    let c = Config::from_lookup(|n| (n == "AGENTDESK_METRICS_ADDR").then(|| "0.0.0.0:9090".to_owned())).unwrap();
    assert_eq!(c.metrics_addr, Some(([0, 0, 0, 0], 9090).into()));
}

#[test]
fn retention_is_read_in_decimal_days_and_bad_values_are_refused_by_name() {
    assert_eq!(Config::from_lookup(|_| None).unwrap().retention, None);
    let days = |v: &'static str| Config::from_lookup(move |n| (n == "AGENTDESK_RETENTION_DAYS").then(|| v.to_owned()));
    assert_eq!(days(" ").unwrap().retention, None);
    assert_eq!(days("30").unwrap().retention, Some(Duration::from_secs(30 * 86400)));
    assert_eq!(days("0.5").unwrap().retention, Some(Duration::from_secs(43200)));
    for bad in ["0", "-1", "ten", "NaN", "inf", "1e9"] {
        let err = days(bad).unwrap_err();
        assert!(err.contains("AGENTDESK_RETENTION_DAYS"), "{bad}: {err}");
    }
}

#[test]
fn the_webhook_lease_follows_the_lease() {
    let c = Config::from_lookup(|n| (n == "AGENTDESK_LEASE_SECS").then(|| "5".to_owned())).unwrap();
    assert_eq!(c.webhook_lease, Duration::from_secs(5));
    assert_eq!(
        Config::from_lookup(|_| None).unwrap().webhook_lease,
        Duration::from_secs(60)
    );
}

#[test]
fn the_settings_are_well_formed() {
    Settings::command().debug_assert();
}

#[test]
fn unset_and_blank_values_mean_the_defaults() {
    let d = Config::default();
    for value in [None, Some(""), Some("  ")] {
        let c = Config::from_lookup(|_| value.map(str::to_owned)).unwrap();
        assert_eq!(
            (c.addr, c.workers, c.db_max_connections, c.runtime_threads),
            (d.addr, d.workers, d.db_max_connections, d.runtime_threads)
        );
        assert_eq!(
            (c.lease, c.stream_idle, c.sse_ping, c.shutdown_grace),
            (d.lease, d.stream_idle, d.sse_ping, d.shutdown_grace)
        );
        assert_eq!((c.log_format, &c.data_dir), (d.log_format, &d.data_dir));
        assert!(c.database_url.is_none() && c.model.is_none() && c.api_tokens.is_empty());
        assert!(!c.allow_private_urls, "the address guard is on by default");
    }
    let c = Config::from_lookup(|n| (n == "AGENTDESK_WORKERS").then(|| " 8 ".to_owned())).unwrap();
    assert_eq!(c.workers, 8);
    let c = Config::from_lookup(|n| (n == "AGENTDESK_RUNTIME_THREADS").then(|| "3".to_owned())).unwrap();
    assert_eq!(c.runtime_threads, 3);
    assert_eq!(Config::default().claimers, stage_parallelism(1));
    let c = Config::from_lookup(|n| (n == "AGENTDESK_CLAIMERS").then(|| "3".to_owned())).unwrap();
    assert_eq!(c.claimers, 3);
    for bad in ["0", "17", "two"] {
        let err = Config::from_lookup(|n| (n == "AGENTDESK_CLAIMERS").then(|| bad.to_owned())).unwrap_err();
        assert!(err.to_string().contains("AGENTDESK_CLAIMERS"), "{bad}: {err}");
    }
    let c = Config::from_lookup(|n| (n == "AGENTDESK_SSE_PING_SECS").then(|| "60".to_owned())).unwrap();
    assert_eq!(c.sse_ping, Duration::from_secs(15));
}
