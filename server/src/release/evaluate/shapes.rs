//! "Export succeeds, device fails": every method with a bounded input is run at its upper
//! bounds and at a few smaller sizes, one dimension at a time.
//!
//! ExecuTorch records that a tensor may vary, not which of its dimensions: a dimension the
//! model treats as fixed fails at every smaller size, which is reported but not a failure. A
//! failure is a method that does not run at its upper bounds, or a dimension that runs at one
//! smaller size and fails at another.

use ferry_runtime::executorch::ExecuTorchProgram;
use ferry_shared::manifest::TensorValue;
use ferry_shared::pte::{self, Dynamism};

use super::ShapeCheck;

/// Most runs per variant.
const MAX_RUNS: usize = 64;
/// Inputs larger than this (elements) are not made up for a check.
const MAX_ELEMENTS: u64 = 1 << 26;

/// Runs the checks; returns them and the first failure's reason.
pub(super) fn check(
    program: &mut ExecuTorchProgram,
    report: &pte::PteReport,
) -> (Vec<ShapeCheck>, Option<String>) {
    let mut checks = Vec::new();
    let mut failure = None;
    for m in &report.methods {
        let inputs = &m.signature.inputs;
        if !inputs.iter().any(|t| t.dynamism == Dynamism::Bounded)
            || !inputs.iter().all(pte::TensorSpec::is_tensor)
        {
            continue;
        }
        let upper: Vec<Vec<u64>> = inputs
            .iter()
            .map(|t| t.shape.iter().map(|d| (*d).max(0) as u64).collect())
            .collect();
        if upper
            .iter()
            .any(|s| s.iter().product::<u64>() > MAX_ELEMENTS)
        {
            continue;
        }
        let top = run(program, &m.name, inputs, &upper);
        let top_ok = top.ok;
        if !top_ok {
            failure.get_or_insert(format!(
                "{} does not run at its upper bounds {:?}: {}",
                m.name,
                upper,
                top.error.clone().unwrap_or_default()
            ));
        }
        checks.push(top);
        if !top_ok {
            continue;
        }
        for (k, t) in inputs.iter().enumerate() {
            if t.dynamism != Dynamism::Bounded {
                continue;
            }
            for (d, bound) in upper[k].iter().enumerate() {
                let mut sizes = vec![1, bound / 2];
                sizes.retain(|s| *s >= 1 && s < bound);
                sizes.dedup();
                let mut outcomes = Vec::new();
                for size in sizes {
                    if checks.len() >= MAX_RUNS {
                        return (checks, failure);
                    }
                    let mut shapes = upper.clone();
                    shapes[k][d] = size;
                    let c = run(program, &m.name, inputs, &shapes);
                    outcomes.push((size, c.ok, c.error.clone()));
                    checks.push(c);
                }
                let ok: Vec<u64> = outcomes.iter().filter(|o| o.1).map(|o| o.0).collect();
                if let Some((size, _, error)) = outcomes.iter().find(|o| !o.1)
                    && !ok.is_empty()
                {
                    failure.get_or_insert(format!(
                        "{} input {k} dimension {d}: runs at size {} but fails at size {size}: {}",
                        m.name,
                        ok[0],
                        error.clone().unwrap_or_default()
                    ));
                }
            }
        }
    }
    (checks, failure)
}

/// One run of `method` with inputs of `shapes` (floats 0.5, integers and flags 0).
fn run(
    program: &mut ExecuTorchProgram,
    method: &str,
    specs: &[pte::TensorSpec],
    shapes: &[Vec<u64>],
) -> ShapeCheck {
    let inputs: Vec<TensorValue> = specs
        .iter()
        .zip(shapes)
        .map(|(t, shape)| {
            let n: u64 = shape.iter().product();
            let fill = if t.dtype.starts_with("float") || t.dtype == "bfloat16" {
                0.5
            } else {
                0.0
            };
            TensorValue {
                dtype: t.dtype.clone(),
                shape: shape.clone(),
                data: vec![fill; n as usize],
            }
        })
        .collect();
    let result = program
        .load_method(method)
        .and_then(|()| program.run(method, &inputs));
    ShapeCheck {
        method: method.to_string(),
        shapes: shapes.to_vec(),
        ok: result.is_ok(),
        error: result.err().map(|e| e.message),
    }
}
