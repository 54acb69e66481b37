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

pub(crate) fn serve(flags: Flags, demo: bool) -> anyhow::Result<ExitCode> {
    let config = Config::load(&flags, &process_env)?;
    init_logging(config.log_json);
    let json = config.log_json;
    let sys = actix_web::rt::System::new();
    sys.block_on(async move {
        let source = if demo {
            server::KeySource::Development
        } else {
            server::KeySource::Provisioned
        };
        let (state, notes) = server::build_state(config, source).await?;
        for n in notes {
            say(json, &n);
        }
        if demo {
            let line = crate::app::demo::publish_demo(&state).await?;
            say(json, &line);
        }
        let (srv, addr) = server::bind(state.clone())?;
        let scheme = if state.config.tls.is_some() { "https" } else { "http" };
        say(
            json,
            &format!(
                "listening on {scheme}://{addr} (data in {})",
                state.config.data.display()
            ),
        );
        if demo {
            say(json, &format!(
                "try: curl -s {scheme}://{addr}/v1/resolve -H 'content-type: application/json' -d \
                 '{{\"model\":\"demo-mlp\",\"install_id\":\"me\",\"app_version\":\"1.0.0\",\"runtime_version\":\"1.5.1\",\
                 \"backends\":[\"XnnpackBackend\",\"VulkanBackend\"],\"platform\":\"android\",\"os_version\":\"14\",\
                 \"device_model\":\"Pixel 8\",\"soc\":\"Tensor G3\",\"ram_mb\":8192}}'"
            ));
        }
        let for_shutdown = state.clone();
        server::spawn_refresh(state);
        let stopped = srv.await;
        // A graceful stop (SIGTERM, SIGINT) writes what is buffered: raw telemetry and this
        // replica's rollup, so a deploy loses no counts.
        crate::fleet::flush::flush_all(&for_shutdown).await;
        say(json, "stopped; buffered telemetry written");
        stopped.context("server stopped with an error")
    })?;
    Ok(ExitCode::SUCCESS)
}
