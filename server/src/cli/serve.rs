//! `ferry serve`.

use std::process::ExitCode;

use anyhow::Context as _;

use crate::app::config::{Config, Flags, process_env};
use crate::app::startup as server;

pub(crate) fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FERRY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal: never escape codes into files, pipes or journald.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Says one startup line: `ferry: ...` on stderr, or, with JSON logs, as a JSON log line (so
/// a log collector sees one format).
fn say(json: bool, line: &str) {
    if json {
        tracing::info!(target: "ferry", "{line}");
    } else {
        eprintln!("ferry: {line}");
    }
}

/// `ferry serve --mirror-of URL --trust FILE`: a site mirror (`crate::mirror`).
pub(crate) fn serve_mirror(
    flags: Flags,
    origin: String,
    trust: std::path::PathBuf,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(&flags, &process_env)?;
    config.log_json |= json;
    init_logging(config.log_json);
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let line = |addr: std::net::SocketAddr| {
        format!(
            "site mirror of {origin} listening on {scheme}://{addr}, holding files in {}",
            config.data.join("mirror").display()
        )
    };
    let json = config.log_json;
    let opts = crate::mirror::MirrorOptions {
        origin: origin.clone(),
        trust,
        origin_token: process_env("FERRY_ORIGIN_TOKEN"),
        origin_ca: process_env("FERRY_ORIGIN_CA").map(std::path::PathBuf::from),
    };
    crate::mirror::run(&config, &opts, |addr| say(json, &line(addr)))?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn serve(flags: Flags, demo: bool, json: bool) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(&flags, &process_env)?;
    // `ferry --json serve`: JSON logs, as FERRY_LOG_FORMAT=json.
    config.log_json |= json;
    init_logging(config.log_json);
    // A first run with --demo works without any setup: an admin token kept in
    // `<data>/admin-token` (created on the first demo run, owner-only), so the next commands
    // can read it and it lasts across restarts. FERRY_ADMIN_TOKEN still works beside it.
    let demo_token = if demo {
        let token = demo_admin_token(&config.data)?;
        config.tokens.push(crate::tokens::TokenEntry::from_secret(
            "demo:admin-token",
            &token,
            crate::tokens::Scope::ALL.to_vec(),
        ));
        Some(token)
    } else {
        None
    };
    let json = config.log_json;
    let sys = actix_web::rt::System::new();
    sys.block_on(async move {
        let source = if demo {
            server::KeySource::Development
        } else {
            server::KeySource::Provisioned
        };
        let (state, notes) = server::build_state(&config, source).await?;
        for n in notes {
            say(json, &n);
        }
        if demo {
            let line = crate::app::demo::publish_demo(&state, &config).await?;
            say(json, &line);
        }
        let bound = crate::app::listen::bind(state.clone(), &config)?;
        let (srv, addr) = (bound.server, bound.addr);
        let scheme = if config.tls.is_some() { "https" } else { "http" };
        let proxies = &config.limits.trusted_proxies;
        if !proxies.is_empty() {
            let list: Vec<String> = proxies.iter().map(ToString::to_string).collect();
            say(
                json,
                &format!(
                    "trusted proxies: {} (the client is the rightmost other hop of {})",
                    list.join(", "),
                    config.limits.client_address_header.name()
                ),
            );
            if proxies.iter().any(|n| n.prefix_len() == 0) {
                say(
                    json,
                    "warning: trusted_proxies holds 0.0.0.0/0 or ::/0: every client can pick its \
                     own address with a forwarding header",
                );
            }
        }
        if let Some(m) = bound.metrics {
            say(
                json,
                &format!("metrics (no token) on http://{m}/metrics; keep this listener private"),
            );
        }
        say(
            json,
            &format!(
                "listening on {scheme}://{addr} (data in {}); dashboard: {scheme}://{addr}/ui",
                config.data.display()
            ),
        );
        if demo {
            if demo_token.is_some() {
                let file = config.data.join("admin-token");
                say(
                    json,
                    &format!(
                        "admin token (every scope) in {}; next, in another terminal: \
                         export FERRY_SERVER={scheme}://{addr} FERRY_TOKEN=$(cat {}); \
                         then: ferry releases demo-mlp; ferry health demo-mlp; ferry rollout status demo-mlp",
                        file.display(),
                        file.display()
                    ),
                );
            }
            say(json, &format!(
                "try: curl -s {scheme}://{addr}/v1/resolve -H 'content-type: application/json' -d \
                 '{{\"model\":\"demo-mlp\",\"install_id\":\"me\",\"app_version\":\"1.0.0\",\"runtime_version\":\"1.5.1\",\
                 \"backends\":[\"XnnpackBackend\",\"VulkanBackend\"],\"platform\":\"android\",\"os_version\":\"14\",\
                 \"device_model\":\"Pixel 8\",\"soc\":\"Tensor G3\",\"ram_mb\":8192}}'"
            ));
        }
        let for_shutdown = state.clone();
        server::spawn_refresh(state, &config);
        let stopped = srv.await;
        // A graceful stop (SIGTERM, SIGINT) writes what is buffered: raw telemetry and this
        // replica's rollup, so a deploy loses no counts.
        crate::fleet::persist::flush::flush_all(for_shutdown.fleet()).await;
        say(json, "stopped; buffered telemetry written");
        stopped.context("server stopped with an error")
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The demo's admin token: read from `<data>/admin-token`, or created there (owner-only).
fn demo_admin_token(data: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let path = data.join("admin-token");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let token = text.trim().to_string();
            if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
                anyhow::bail!(
                    "{} does not hold a token of 16 or more printable characters; remove it to get a new one",
                    path.display()
                );
            }
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut secret = [0u8; 16];
            getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
            let token = hex::encode(secret);
            std::fs::create_dir_all(data)
                .with_context(|| format!("cannot create {}", data.display()))?;
            ferry_fs::write(&path, token.as_bytes(), ferry_fs::Mode::OwnerOnly)
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(token)
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}
