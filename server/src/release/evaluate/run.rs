//! Runs a release's variants through the linked ExecuTorch runtime (feature `executorch`).
//!
//! Every variant is opened once; the set is then read a chunk at a time (a multiple of every
//! variant's batch) and each chunk goes through every variant, so outputs are compared with the
//! reference's sample by sample while only one chunk is in memory.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use ferry_runtime::executorch::{self as et, ExecuTorchProgram};
use ferry_shared::manifest::{ReleaseManifest, TensorValue};
use ferry_shared::{VariantId, pte};

use super::dataset::Dataset;
use super::{EvaluationSpec, Measured, Metric, Report, Run, score};
use crate::release::sign::{VariantSpec, VariantsFile};

/// Most samples one chunk may hold (the least common multiple of the variants' batches).
const MAX_CHUNK: u64 = 1 << 14;

/// A variant opened and fitted to the set.
struct Prepared {
    program: ExecuTorchProgram,
    method: String,
    report: pte::PteReport,
    /// Samples per execute.
    batch: u64,
    /// Whether the method's inputs have the sample axis (else one sample, fed as is).
    batched: bool,
    time: Duration,
    state: State,
}

enum State {
    Running {
        correct: u64,
        agree: u64,
        max_error: f64,
        samples: u64,
    },
    Failed(String),
}

/// Evaluates `spec`'s variants (files relative to `base`) on its `[evaluation]` set; `progress`
/// is told samples done and total after each chunk.
pub fn evaluate(
    spec: &VariantsFile,
    base: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> anyhow::Result<Report> {
    let ev = spec.evaluation.as_ref().context(
        "this VARIANTS.toml has no [evaluation] section (dataset, metric, reference, \
             max_drop or max_error; see docs/publishing.md)",
    )?;
    let ids: Vec<VariantId> = spec.variants.iter().map(|v| v.id.clone()).collect();
    ev.check(&ids)?;
    let set_path = base.join(&ev.dataset);
    let set = Dataset::open(&set_path)
        .with_context(|| format!("the evaluation set {}", set_path.display()))?;
    if ev.metric == Metric::Top1 && !set.has_labels() {
        bail!("metric top1 needs labels in the evaluation set (int64, one per sample)");
    }
    let baseline = match &ev.baseline {
        Some(p) => {
            let b = read_release(&base.join(p))?;
            super::check_baseline(ev, &set.sha256().to_hex(), &b)?;
            Some(b)
        }
        None => None,
    };
    let mut prepared: Vec<(VariantId, Result<Prepared, Measured>)> = spec
        .variants
        .iter()
        .map(|v| (v.id.clone(), prepare(v, base, ev, &set)))
        .collect();
    if let Some((_, Err(m))) = prepared.iter().find(|(id, _)| *id == ev.reference) {
        let why = match m {
            Measured::NotEvaluated(w) | Measured::Failed(w) => w.clone(),
            Measured::Ran { .. } => String::new(),
        };
        bail!(
            "the reference {} cannot run on this machine ({why}); choose a reference variant \
             this machine's runtime can execute (XNNPACK or portable)",
            ev.reference.as_str()
        );
    }
    let chunk = prepared
        .iter()
        .filter_map(|(_, p)| p.as_ref().ok().map(|p| p.batch))
        .try_fold(1u64, |l, b| {
            let l = lcm(l, b);
            (l <= MAX_CHUNK).then_some(l)
        })
        .context("the variants' batch sizes have no common multiple below 16384")?;
    let total = set.samples() / chunk * chunk;
    if total == 0 {
        bail!(
            "the evaluation set has {} samples, fewer than one batch of {chunk}",
            set.samples()
        );
    }
    let reference = ids.iter().position(|id| *id == ev.reference).unwrap_or(0);
    let mut first = 0;
    while first < total {
        run_chunk(&mut prepared, reference, &set, first, chunk, ev.metric)?;
        first += chunk;
        progress(first, total);
    }
    let mut shapes = Vec::new();
    for (_, p) in &mut prepared {
        shapes.push(match p {
            Ok(p) => {
                let (checks, failure) = super::shapes::check(&mut p.program, &p.report);
                if let (Some(why), State::Running { .. }) = (failure, &p.state) {
                    p.state = State::Failed(why);
                }
                Some((checks, p.batch, p.time))
            }
            Err(_) => None,
        });
    }
    let measured = prepared
        .into_iter()
        .map(|(id, p)| {
            let m = match p {
                Err(m) => m,
                Ok(p) => match p.state {
                    State::Failed(why) => Measured::Failed(why),
                    State::Running {
                        correct,
                        agree,
                        max_error,
                        samples,
                    } => Measured::Ran {
                        correct,
                        agree,
                        max_error,
                        samples,
                    },
                },
            };
            (id, m)
        })
        .collect();
    let run = Run {
        dataset_sha256: set.sha256().to_hex(),
        samples: total,
        dropped: set.samples() - total,
        runtime_version: et::RUNTIME_VERSION.to_string(),
    };
    let mut report = score(ev, &run, measured, baseline.as_ref());
    for (v, extra) in report.variants.iter_mut().zip(shapes) {
        if let Some((checks, batch, time)) = extra {
            v.shapes = checks;
            v.batch = Some(batch);
            v.time_ms = Some(time.as_millis() as u64);
        }
    }
    Ok(report)
}

/// Reads a signed release file (`release.json`) as its manifest.
fn read_release(path: &Path) -> anyhow::Result<ReleaseManifest> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the baseline {}", path.display()))?;
    let env: ferry_shared::trust::dsse::Envelope = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a signed release", path.display()))?;
    let payload = ferry_shared::trust::dsse::decode_payload(&env, &Default::default())?;
    ReleaseManifest::from_json(&payload)
        .with_context(|| format!("{} does not hold a release manifest", path.display()))
}

fn lcm(a: u64, b: u64) -> u64 {
    let gcd = |mut x: u64, mut y: u64| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    if a == 0 || b == 0 {
        0
    } else {
        a / gcd(a, b) * b
    }
}

/// Opens a variant and fits the set to its method, or says why it is not evaluated (a backend
/// or kernels this runtime lacks) or failed (it cannot be opened, or the set does not fit).
fn prepare(
    v: &VariantSpec,
    base: &Path,
    ev: &EvaluationSpec,
    set: &Dataset,
) -> Result<Prepared, Measured> {
    let failed = |why: String| Measured::Failed(why);
    let path = base.join(&v.file);
    let bytes = std::fs::read(&path).map_err(|e| failed(format!("{}: {e}", path.display())))?;
    let report = pte::inspect(&bytes).map_err(|e| failed(format!("not a program: {e}")))?;
    let registered = et::registered_backends();
    let missing: Vec<String> = report
        .backends()
        .into_iter()
        .filter(|b| !registered.iter().any(|r| r == b))
        .collect();
    if !missing.is_empty() {
        return Err(Measured::NotEvaluated(format!(
            "this machine's runtime has no {} (it registers {})",
            missing.join(", "),
            registered.join(", ")
        )));
    }
    let ops = et::registered_operators();
    let lacking: Vec<&str> = report
        .methods
        .iter()
        .flat_map(|m| m.kernel_calls.keys())
        .filter(|k| ops.binary_search(k).is_err())
        .map(String::as_str)
        .collect();
    if !lacking.is_empty() {
        return Err(Measured::NotEvaluated(format!(
            "this machine's runtime has no kernel for {}",
            lacking.join(", ")
        )));
    }
    let data: Vec<std::path::PathBuf> = v.data.iter().map(|d| base.join(d)).collect();
    let data: Vec<&Path> = data.iter().map(|d| d.as_path()).collect();
    let mut program = ExecuTorchProgram::open(&path, &data).map_err(|e| failed(e.message))?;
    program
        .load_method(&ev.method)
        .map_err(|e| failed(e.message))?;
    let sig = report
        .methods
        .iter()
        .find(|m| m.name == ev.method)
        .map(|m| m.signature.clone())
        .ok_or_else(|| failed(format!("the program has no method {}", ev.method)))?;
    let (batch, batched) = fit(&sig, set).map_err(failed)?;
    Ok(Prepared {
        program,
        method: ev.method.clone(),
        report,
        batch,
        batched,
        time: Duration::ZERO,
        state: State::Running {
            correct: 0,
            agree: 0,
            max_error: 0.0,
            samples: 0,
        },
    })
}

/// How the set's samples feed the method: `(batch, true)` when each input is `[B, sample...]`,
/// `(1, false)` when one sample is the whole input.
fn fit(sig: &pte::Signature, set: &Dataset) -> Result<(u64, bool), String> {
    if sig.inputs.len() != set.inputs() {
        return Err(format!(
            "the method takes {} inputs, the set holds {}",
            sig.inputs.len(),
            set.inputs()
        ));
    }
    let mut mode = None;
    for (k, spec) in sig.inputs.iter().enumerate() {
        let Some((dtype, sample)) = set.input_spec(k) else {
            return Err(format!("input_{k} is missing"));
        };
        if spec.dtype != dtype {
            return Err(format!(
                "input_{k} holds {dtype}, the method's input {k} is {}",
                spec.dtype
            ));
        }
        let shape: Vec<u64> = spec.shape.iter().map(|d| (*d).max(0) as u64).collect();
        let this = if shape.len() == sample.len() + 1 && shape[1..] == *sample && shape[0] > 0 {
            (shape[0], true)
        } else if shape == sample {
            (1, false)
        } else {
            return Err(format!(
                "input_{k}'s samples are {sample:?}, which do not fit the method's input {k} \
                 ({}); expected [batch, ...] or one sample",
                spec.describe()
            ));
        };
        if *mode.get_or_insert(this) != this {
            return Err("the method's inputs disagree on the batch size".into());
        }
    }
    mode.ok_or_else(|| "the method takes no inputs".into())
}

/// Runs one chunk of samples through every running variant and scores it.
fn run_chunk(
    prepared: &mut [(VariantId, Result<Prepared, Measured>)],
    reference: usize,
    set: &Dataset,
    first: u64,
    count: u64,
    metric: Metric,
) -> anyhow::Result<()> {
    let inputs = set.read_inputs(first, count)?;
    let labels = set.read_labels(first, count)?;
    let mut rows: Vec<Option<Vec<Vec<f64>>>> = Vec::with_capacity(prepared.len());
    for (_, p) in prepared.iter_mut() {
        rows.push(match p {
            Ok(p) if matches!(p.state, State::Running { .. }) => {
                match outputs(p, &inputs, count, metric != Metric::MaxAbsError) {
                    Ok(r) => Some(r),
                    Err(why) => {
                        p.state = State::Failed(why);
                        None
                    }
                }
            }
            _ => None,
        });
    }
    let reference_rows = rows.get(reference).cloned().flatten();
    for ((_, p), got) in prepared.iter_mut().zip(&rows) {
        let (Ok(p), Some(got)) = (p, got) else {
            continue;
        };
        if let Err(why) = tally(
            &mut p.state,
            got,
            reference_rows.as_deref(),
            labels.as_deref(),
            metric,
        ) {
            p.state = State::Failed(why);
        }
    }
    Ok(())
}

/// Runs a variant over a chunk, a batch at a time; output 0 split into one row per sample
/// (with `classes`, each row must be one sample's class scores: the output's last axis).
fn outputs(
    p: &mut Prepared,
    inputs: &[TensorValue],
    count: u64,
    classes: bool,
) -> Result<Vec<Vec<f64>>, String> {
    let mut rows = Vec::with_capacity(count as usize);
    for b in 0..count / p.batch {
        let feed: Vec<TensorValue> = inputs
            .iter()
            .map(|t| rows_of(t, b * p.batch, p.batch, p.batched))
            .collect();
        let started = Instant::now();
        let out = p
            .program
            .run(&p.method, &feed)
            .map_err(|e| format!("execute failed: {}", e.message))?;
        p.time += started.elapsed();
        let Some(first) = out.first() else {
            return Err("the method returned no output".into());
        };
        let per = first.data.len() / p.batch as usize;
        if per == 0 || (p.batched && first.shape.first() != Some(&p.batch)) {
            return Err(format!(
                "output 0 has shape {:?}: not one row per sample of a batch of {}",
                first.shape, p.batch
            ));
        }
        if classes && first.shape.last().map(|c| *c as usize) != Some(per) {
            return Err(format!(
                "top1 and agreement take output 0 as [batch, classes]; it is {:?}",
                first.shape
            ));
        }
        rows.extend(first.data.chunks_exact(per).map(<[f64]>::to_vec));
    }
    Ok(rows)
}

/// Samples `first .. first + n` of a `[count, sample...]` tensor, with or without the axis.
fn rows_of(t: &TensorValue, first: u64, n: u64, batched: bool) -> TensorValue {
    let per: u64 = t.shape[1..].iter().product();
    let data = t.data[(first * per) as usize..((first + n) * per) as usize].to_vec();
    let mut shape = if batched { vec![n] } else { Vec::new() };
    shape.extend(&t.shape[1..]);
    TensorValue {
        dtype: t.dtype.clone(),
        shape,
        data,
    }
}

/// Adds a chunk's rows to a variant's tallies.
fn tally(
    state: &mut State,
    got: &[Vec<f64>],
    reference: Option<&[Vec<f64>]>,
    labels: Option<&[i64]>,
    metric: Metric,
) -> Result<(), String> {
    let State::Running {
        correct,
        agree,
        max_error,
        samples,
    } = state
    else {
        return Ok(());
    };
    for (i, row) in got.iter().enumerate() {
        let class = argmax(row);
        if let Some(label) = labels.and_then(|l| l.get(i)) {
            *correct += u64::from(class.is_some_and(|c| c as i64 == *label));
        }
        if let Some(r) = reference.and_then(|r| r.get(i)) {
            if r.len() != row.len() {
                return Err(format!(
                    "output 0 has {} values per sample, the reference {}",
                    row.len(),
                    r.len()
                ));
            }
            *agree += u64::from(class.is_some() && class == argmax(r));
            if metric == Metric::MaxAbsError {
                for (a, b) in row.iter().zip(r) {
                    let d = (a - b).abs();
                    *max_error = if d.is_nan() {
                        f64::INFINITY
                    } else {
                        max_error.max(d)
                    };
                }
            }
        }
        *samples += 1;
    }
    Ok(())
}

/// The index of the largest value (class axis last; a row is one sample's classes), `None`
/// when a value is NaN.
fn argmax(row: &[f64]) -> Option<usize> {
    if row.iter().any(|v| v.is_nan()) {
        return None;
    }
    row.iter()
        .enumerate()
        .fold(None, |best: Option<(usize, f64)>, (i, v)| match best {
            Some((_, b)) if b >= *v => best,
            _ => Some((i, *v)),
        })
        .map(|(i, _)| i)
}
