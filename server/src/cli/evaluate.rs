//! `ferry evaluate VARIANTS.toml [--json]`: scores every variant this machine can run on the
//! `[evaluation]` set through the real runtime (feature `executorch`); exit 8 when one fails.

use std::path::Path;
use std::process::ExitCode;

use crate::release::sign;

/// Runs the evaluation and prints it; exit 0 when every evaluated variant passes, else 8.
pub(crate) fn evaluate_cmd(variants: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let spec = sign::read_variants(variants)?;
    let base = variants.parent().unwrap_or(Path::new("."));
    run(&spec, base, json)
}

#[cfg(not(feature = "executorch"))]
fn run(_spec: &sign::VariantsFile, _base: &Path, _json: bool) -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "this ferry was built without the ExecuTorch runtime, so it cannot run programs: run \
         scripts/setup-executorch.sh, then build with `cargo build --release -p ferry-server \
         --features executorch`"
    )
}

#[cfg(feature = "executorch")]
fn run(spec: &sign::VariantsFile, base: &Path, json: bool) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;
    let bar = if json || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(0).with_message("evaluating")
    };
    let report = crate::release::evaluate::run::evaluate(spec, base, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let e = &report.evaluation;
        println!(
            "{} samples ({} dropped: a partial batch), metric {}, reference {}, runtime {}",
            e.samples, e.dropped, e.metric, e.reference, e.runtime_version
        );
        if let Some(b) = &e.baseline {
            println!(
                "  compared with the result recorded for baseline release {}",
                b.version
            );
        }
        for v in &report.variants {
            let r = &v.result;
            let status = match r.passed {
                Some(true) => "pass",
                Some(false) => "FAIL",
                None => "not evaluated",
            };
            let value = r.value.map_or_else(|| "-".into(), |x| format!("{x:.4}"));
            let mut drop = r
                .drop
                .map_or_else(String::new, |d| format!(" drop {:.2}%", d * 100.0));
            if let (Some(b), Some(d)) = (r.baseline_value, r.baseline_drop) {
                drop.push_str(&format!(" (baseline {b:.4}, drop {:.2}%)", d * 100.0));
            }
            let time = v.time_ms.map_or_else(String::new, |t| format!(" {t} ms"));
            println!("  {:<24} {status:<13} {value}{drop}{time}", r.id);
            if let Some(why) = &r.why_not {
                println!("    {why}");
            }
        }
    }
    Ok(if report.failed().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(super::exit::EVALUATION_FAILED)
    })
}
