//! ExecuTorch's own load of a program and its data files, with nothing of ferry's around it:
//! the `Module` of the `executorch` crate (through `ferry-runtime`'s thin wrapper, which maps
//! large files as ferry's client does), then the method's load. The baseline of the cached-load
//! benchmark (`bench/cached_load.sh`): prints the time from before the open to after the
//! method's load, in milliseconds, as one JSON object.
//!
//! With `--read`, the files are read into memory by ExecuTorch's own file loader instead of
//! mapped. With `--sealed`, the files are first sealed (`ferry-seal-1`, into a temporary folder, not
//! timed) and loaded through the client's decrypting data loader instead, as a sealed variant
//! is (`bench/sealed.sh`). With `--runs N`, the method then runs N times on zero inputs of its
//! declared shapes: the first run and the median of the others are reported. The process's
//! resident memory before the load, after it and at its peak are reported too (Linux).
//!
//! ```sh
//! cargo run --release -p ferry-client --features executorch --example module_load -- \
//!   --program big.pte --data big.ptd [--sealed] [--runs 5]
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use ferry_runtime::executorch::ExecuTorchProgram;
use ferry_shared::manifest::TensorValue;

#[derive(Parser)]
#[command(about = "Time ExecuTorch's own load of a program and its data files")]
struct Args {
    /// The program (`.pte`).
    #[arg(long)]
    program: PathBuf,
    /// Its data files (`.ptd`), in order.
    #[arg(long)]
    data: Vec<PathBuf>,
    /// The method to load.
    #[arg(long, default_value = "forward")]
    method: String,
    /// Seal the files first (not timed) and load them through the decrypting data loader.
    #[arg(long)]
    sealed: bool,
    /// Read the plain files into memory instead of mapping them (ExecuTorch's file loader).
    #[arg(long)]
    read: bool,
    /// Run the method this many times after the load (zero inputs of its declared shapes).
    #[arg(long, default_value_t = 0)]
    runs: usize,
}

/// A field of `/proc/self/status` in KiB (0 where there is none).
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Seals `path` into `dir` with a fixed key (a benchmark's, never a release's).
fn seal(path: &Path, dir: &Path) -> Result<ferry_client::seal::SealedSource, String> {
    let out = dir.join(path.file_name().unwrap_or_default());
    ferry_fs::sealed::seal_file(path, &out, &[1; 32], &[2; 32])
        .map_err(|e| format!("sealing {}: {e}", path.display()))?;
    ferry_client::seal::SealedSource::open(&out, &[2; 32]).map_err(|e| e.to_string())
}

fn open(args: &Args, dir: &Path) -> Result<(ExecuTorchProgram, f64), String> {
    if args.sealed {
        let program = seal(&args.program, dir)?;
        let data = match args.data.as_slice() {
            [] => None,
            [d] => Some(seal(d, dir)?),
            _ => return Err("a sealed program takes one data file".into()),
        };
        let started = Instant::now();
        let mut p = ExecuTorchProgram::open_sources(
            Box::new(program),
            data.map(|d| Box::new(d) as Box<dyn ferry_runtime::ProgramSource>),
        )
        .map_err(|e| e.to_string())?;
        p.load_method(&args.method).map_err(|e| e.to_string())?;
        return Ok((p, started.elapsed().as_secs_f64() * 1000.0));
    }
    let started = Instant::now();
    let data: Vec<&Path> = args.data.iter().map(PathBuf::as_path).collect();
    let mmap_from = if args.read {
        u64::MAX
    } else {
        ferry_runtime::executorch::MMAP_FROM_BYTES
    };
    let mut p =
        ExecuTorchProgram::open_with(&args.program, &data, mmap_from).map_err(|e| e.to_string())?;
    p.load_method(&args.method).map_err(|e| e.to_string())?;
    Ok((p, started.elapsed().as_secs_f64() * 1000.0))
}

/// Runs the method `n` times on zero inputs: the first run's and the others' times (ms).
fn runs(p: &mut ExecuTorchProgram, method: &str, n: usize) -> Result<Vec<f64>, String> {
    let sig = p.signature(method).map_err(|e| e.to_string())?;
    let inputs: Vec<TensorValue> = sig
        .inputs
        .iter()
        .map(|t| TensorValue {
            dtype: t.dtype.clone(),
            shape: t.shape.clone(),
            data: vec![0.0; t.shape.iter().product::<u64>() as usize],
        })
        .collect();
    (0..n)
        .map(|_| {
            let started = Instant::now();
            p.run(method, &inputs).map_err(|e| e.to_string())?;
            Ok(started.elapsed().as_secs_f64() * 1000.0)
        })
        .collect()
}

fn main() -> ExitCode {
    let args = Args::parse();
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("module_load: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rss_before = status_kb("VmRSS:");
    let outcome = open(&args, dir.path()).and_then(|(mut p, ms)| {
        let rss_loaded = status_kb("VmRSS:");

        let times = runs(&mut p, &args.method, args.runs)?;
        let mut rest: Vec<f64> = times.iter().skip(1).copied().collect();
        rest.sort_by(f64::total_cmp);
        Ok(serde_json::json!({
            "duration_ms": ms,
            "load_mode": p.load_mode(),
            "first_run_ms": times.first(),
            "steady_run_ms": rest.get(rest.len() / 2),
            "rss_before_kb": rss_before,
            "rss_loaded_kb": rss_loaded,
            "hwm_kb": status_kb("VmHWM:"),
        }))
    });
    match outcome {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("module_load: {e}");
            ExitCode::FAILURE
        }
    }
}
