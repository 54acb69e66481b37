//! ExecuTorch's own load of a program and its data files, with nothing of ferry's around it:
//! the `Module` of the `executorch` crate (through `ferry-runtime`'s thin wrapper, which maps
//! large files as ferry's client does), then the method's load. The baseline of the cached-load
//! benchmark (`bench/cached_load.sh`): prints the time from before the open to after the
//! method's load, in milliseconds, as one JSON object.
//!
//! ```sh
//! cargo run --release -p ferry-client --features executorch --example module_load -- \
//!   --program big.pte --data big.ptd
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use ferry_runtime::executorch::ExecuTorchProgram;

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
}

fn main() -> ExitCode {
    let args = Args::parse();
    let started = Instant::now();
    let data: Vec<&std::path::Path> = args.data.iter().map(PathBuf::as_path).collect();
    let loaded = ExecuTorchProgram::open(&args.program, &data).and_then(|mut p| {
        p.load_method(&args.method)?;
        Ok(p)
    });
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    match loaded {
        Ok(p) => {
            println!(
                "{}",
                serde_json::json!({"duration_ms": ms, "load_mode": p.load_mode()})
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("module_load: {e}");
            ExitCode::FAILURE
        }
    }
}
