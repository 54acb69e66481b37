//! What timing every run costs (docs/client.md, field latency): the same model loaded twice
//! from one server, once with run timing on and once off (`ClientBuilder::time_runs`), run in
//! alternating rounds of N calls; prints per-call times of each (median, min, max over the
//! rounds), the per-round ratio timed/untimed and the overhead per call in nanoseconds, as
//! one JSON object. Used by `bench/run_timing.sh`.
//!
//! ```sh
//! cargo run --release -p ferry-client --features executorch --example run_timing -- \
//!   --server http://127.0.0.1:8080 --trust ferry-data/keys/trust.json --cache /tmp/c \
//!   --model demo-mlp --input tests/fixtures/pte/mlp-v1-xnnpack.json
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, DeviceInfo};
use ferry_shared::manifest::{Golden, Platform};
use ferry_shared::trust::TrustFile;

#[derive(Parser)]
#[command(about = "Time a model's runs with and without ferry's run timing")]
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
    #[arg(long, default_value_t = 2000)]
    calls: u32,
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
            eprintln!("run_timing: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    let trust = TrustFile::from_json(&std::fs::read(&args.trust)?)?;
    let golden: Golden = serde_json::from_slice(&std::fs::read(&args.input)?)?;
    let device = DeviceInfo {
        install_id: "run-timing".into(),
        platform: Platform::Linux,
        os_version: String::new(),
        device_model: String::new(),
        soc: String::new(),
        ram_mb: 4096,
        claimed_backends: Vec::new(),
    };
    let load = |timed: bool| -> anyhow::Result<ferry_client::LoadedModel> {
        let client = ClientBuilder::new(args.server.clone(), trust.clone())
            .cache_dir(&args.cache)
            .app_version(semver::Version::new(1, 0, 0))
            .runtime(Arc::new(ExecuTorchRuntime::new()))
            .time_runs(timed)
            .build()?;
        Ok(client.load(&args.model, &device)?)
    };
    let mut models = [load(true)?, load(false)?];
    // Warm both up.
    for m in &mut models {
        for _ in 0..100 {
            m.run(&golden.input)?;
        }
    }
    let (mut timed, mut plain, mut ratios, mut overhead) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let mut per_call = [0.0f64; 2];
        // Alternate which goes first, so drift favours neither.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let t = Instant::now();
            for _ in 0..args.calls {
                models[i].run(&golden.input)?;
            }
            per_call[i] = t.elapsed().as_secs_f64() * 1e6 / f64::from(args.calls);
        }
        timed.push(per_call[0]);
        plain.push(per_call[1]);
        ratios.push(per_call[0] / per_call[1]);
        overhead.push((per_call[0] - per_call[1]) * 1000.0);
    }
    println!(
        "{}",
        serde_json::json!({
            "model": args.model, "calls_per_round": args.calls, "rounds": args.rounds,
            "timed_us_per_call": stats(timed), "untimed_us_per_call": stats(plain),
            "ratio": stats(ratios), "overhead_ns_per_call": stats(overhead),
        })
    );
    Ok(())
}
