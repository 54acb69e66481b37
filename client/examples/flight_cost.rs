//! What crash-safe loading costs (docs/client.md, "Crash-safe loading"): the flight recorder's
//! mark and clear around each native step, against the same loops without it
//! (`ClientBuilder::record_flights`). Two measurements, each in alternating rounds in one
//! process so drift favours neither:
//!
//! - per run: one model loaded twice (recorded, not recorded; both with run timing off), N
//!   calls per round;
//! - per load: N loads per round of the cached model (`LoadMode::CachedOrDownload`: no
//!   network), each a program open, method load and golden check, by a client with and one
//!   without the recorder.
//!
//! Prints the per-call and per-load times of each (median, min, max over the rounds), the
//! ratios, and the overheads (ns per run, ms per load), as one JSON object. Used by
//! `bench/flight_cost.sh`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{Client, ClientBuilder, DeviceInfo, LoadMode, LoadOptions};
use ferry_shared::manifest::{Golden, Platform};
use ferry_shared::trust::TrustFile;

#[derive(Parser)]
#[command(about = "Time runs and loads with and without ferry's flight recorder")]
struct Args {
    /// Server URL.
    #[arg(long)]
    server: String,
    /// Trust file (a server's keys/trust.json).
    #[arg(long)]
    trust: PathBuf,
    /// Cache folder.
    #[arg(long)]
    cache: PathBuf,
    /// Model name.
    #[arg(long)]
    model: String,
    /// A sidecar JSON whose `input` the model runs on.
    #[arg(long)]
    input: PathBuf,
    /// Calls per round.
    #[arg(long, default_value_t = 5000)]
    calls: u32,
    /// Loads per round.
    #[arg(long, default_value_t = 20)]
    loads: u32,
    /// Rounds of each.
    #[arg(long, default_value_t = 15)]
    rounds: u32,
}

fn stats(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(f64::total_cmp);
    serde_json::json!({"median": v[v.len() / 2], "min": v[0], "max": v[v.len() - 1]})
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flight_cost: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Per-unit times of `work(0)` and `work(1)` over alternating rounds: (first, second).
fn rounds(
    n: u32,
    mut work: impl FnMut(usize) -> anyhow::Result<f64>,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 0..n {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut t = [0.0; 2];
        for i in order {
            t[i] = work(i)?;
        }
        a.push(t[0]);
        b.push(t[1]);
    }
    Ok((a, b))
}

fn run(args: &Args) -> anyhow::Result<()> {
    let trust = TrustFile::from_json(&std::fs::read(&args.trust)?)?;
    let golden: Golden = serde_json::from_slice(&std::fs::read(&args.input)?)?;
    let device = DeviceInfo {
        install_id: "flight-cost".into(),
        platform: Platform::Linux,
        os_version: String::new(),
        device_model: String::new(),
        soc: String::new(),
        ram_mb: 4096,
        claimed_backends: Vec::new(),
    };
    let client = |recorded: bool| -> anyhow::Result<Arc<Client>> {
        Ok(Arc::new(
            ClientBuilder::new(args.server.clone(), trust.clone())
                .cache_dir(&args.cache)
                .app_version(semver::Version::new(1, 0, 0))
                .runtime(Arc::new(ExecuTorchRuntime::new()))
                .time_runs(false)
                .record_flights(recorded)
                .build()?,
        ))
    };
    let clients = [client(true)?, client(false)?];
    let mut models = [
        clients[0].load(&args.model, &device)?,
        clients[1].load(&args.model, &device)?,
    ];
    for m in &mut models {
        for _ in 0..200 {
            m.run(&golden.input)?;
        }
    }
    let (run_on, run_off) = rounds(args.rounds, |i| {
        let t = Instant::now();
        for _ in 0..args.calls {
            models[i].run(&golden.input)?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / f64::from(args.calls))
    })?;
    drop(models);
    let cached = LoadOptions {
        mode: LoadMode::CachedOrDownload,
        ..LoadOptions::default()
    };
    let (load_on, load_off) = rounds(args.rounds, |i| {
        let t = Instant::now();
        for _ in 0..args.loads {
            drop(clients[i].load_with(&args.model, &device, &cached)?);
        }
        Ok(t.elapsed().as_secs_f64() * 1e3 / f64::from(args.loads))
    })?;
    let diff = |a: &[f64], b: &[f64], scale: f64| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y) * scale)
            .collect::<Vec<_>>()
    };
    let ratio = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x / y).collect::<Vec<_>>();
    println!(
        "{}",
        serde_json::json!({
            "model": args.model, "rounds": args.rounds,
            "calls_per_round": args.calls, "loads_per_round": args.loads,
            "run_us_recorded": stats(run_on.clone()), "run_us_plain": stats(run_off.clone()),
            "run_ratio": stats(ratio(&run_on, &run_off)),
            "run_overhead_ns": stats(diff(&run_on, &run_off, 1000.0)),
            "load_ms_recorded": stats(load_on.clone()), "load_ms_plain": stats(load_off.clone()),
            "load_ratio": stats(ratio(&load_on, &load_off)),
            "load_overhead_ms": stats(diff(&load_on, &load_off, 1.0)),
        })
    );
    Ok(())
}
