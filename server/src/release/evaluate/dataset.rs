//! The evaluation set: a `.safetensors` file with `input_0` ... `input_{n-1}` (each indexed by
//! sample along its first axis) and optionally `labels` (int64, one per sample).
//!
//! The header is parsed and checked by the `safetensors` crate; samples are then read from the
//! file a batch at a time (positioned reads), so memory stays at one batch however large the
//! set is; nothing is held twice (the digest is taken streaming, by `ferry_fs::sha256_file`).

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use anyhow::{Context as _, bail};
use ferry_shared::Sha256Digest;
use ferry_shared::manifest::TensorValue;
use safetensors::tensor::{Dtype, Metadata};

/// Largest header accepted (the tensor table), well above any real evaluation set's.
const MAX_HEADER: u64 = 1 << 20;
/// Most inputs a method may take from the set.
const MAX_INPUTS: usize = 64;

/// One tensor of the set: where its bytes start and how one sample looks.
#[derive(Debug, Clone)]
struct Column {
    dtype: Dtype,
    /// Sizes of one sample (the tensor's shape without its first axis).
    sample_shape: Vec<u64>,
    /// Bytes of one sample.
    sample_bytes: u64,
    /// Absolute offset of sample 0.
    start: u64,
}

/// An opened evaluation set.
#[derive(Debug)]
pub struct Dataset {
    file: File,
    inputs: Vec<Column>,
    labels: Option<Column>,
    samples: u64,
    sha256: Sha256Digest,
}

impl Dataset {
    /// Opens and checks `path`: a valid header, `input_0` ... in order with no gap, every
    /// tensor with the same number of samples, `labels` (if any) int64 with one per sample,
    /// and a file exactly as long as its tensors. Its digest is taken here, streaming.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let mut file =
            File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let len = file.metadata()?.len();
        let mut n = [0u8; 8];
        file.read_exact(&mut n).map_err(|_| {
            anyhow::anyhow!("{}: not a .safetensors file (too short)", path.display())
        })?;
        let header_len = u64::from_le_bytes(n);
        if header_len > MAX_HEADER || header_len + 8 > len {
            bail!(
                "{}: not a .safetensors file (a header of {header_len} bytes in a file of {len})",
                path.display()
            );
        }
        let mut header = vec![0u8; header_len as usize];
        file.read_exact(&mut header)?;
        let meta: Metadata = serde_json::from_slice(&header)
            .with_context(|| format!("{}: the .safetensors header is invalid", path.display()))?;
        let base = 8 + header_len;
        if base + meta.data_len() as u64 != len {
            bail!(
                "{}: the file is {len} bytes, its header describes {}",
                path.display(),
                base + meta.data_len() as u64
            );
        }
        let column = |name: &str| -> anyhow::Result<Option<(Column, u64)>> {
            let Some(info) = meta.info(name) else {
                return Ok(None);
            };
            let Some((&samples, rest)) = info.shape.split_first() else {
                bail!("{name} has no sample axis (a scalar)");
            };
            let total = (info.data_offsets.1 - info.data_offsets.0) as u64;
            let sample_bytes = if samples == 0 {
                0
            } else {
                total / samples as u64
            };
            Ok(Some((
                Column {
                    dtype: info.dtype,
                    sample_shape: rest.iter().map(|d| *d as u64).collect(),
                    sample_bytes,
                    start: base + info.data_offsets.0 as u64,
                },
                samples as u64,
            )))
        };
        let mut inputs = Vec::new();
        let mut samples = None;
        for k in 0..=MAX_INPUTS {
            let Some((c, s)) = column(&format!("input_{k}"))? else {
                break;
            };
            if k == MAX_INPUTS {
                bail!("more than {MAX_INPUTS} inputs");
            }
            if *samples.get_or_insert(s) != s {
                bail!(
                    "input_{k} has {s} samples, input_0 has {}",
                    samples.unwrap_or(0)
                );
            }
            dtype_name(c.dtype).with_context(|| {
                format!(
                    "input_{k} has element type {:?}, which ferry cannot feed",
                    c.dtype
                )
            })?;
            inputs.push(c);
        }
        let Some(samples) = samples else {
            bail!("{}: no input_0 tensor", path.display());
        };
        let names = meta.tensors();
        if let Some(extra) = names
            .keys()
            .find(|n| *n != "labels" && !is_input(n, inputs.len()))
        {
            bail!(
                "{}: unexpected tensor {extra:?} (expected input_0 ... input_{} and labels)",
                path.display(),
                inputs.len() - 1
            );
        }
        let labels = match column("labels")? {
            None => None,
            Some((c, s)) => {
                if c.dtype != Dtype::I64 || !c.sample_shape.is_empty() {
                    bail!("labels must be int64 with one value per sample");
                }
                if s != samples {
                    bail!("labels has {s} values, the inputs {samples} samples");
                }
                Some(c)
            }
        };
        let sha256 = Sha256Digest::from_bytes(
            ferry_fs::sha256_file(path)
                .with_context(|| format!("cannot read {}", path.display()))?,
        );
        Ok(Self {
            file,
            inputs,
            labels,
            samples,
            sha256,
        })
    }

    /// Number of samples.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Number of inputs (`input_0` ...).
    pub fn inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Whether it has `labels`.
    pub fn has_labels(&self) -> bool {
        self.labels.is_some()
    }

    /// The file's SHA-256.
    pub fn sha256(&self) -> Sha256Digest {
        self.sha256
    }

    /// `input_k`'s element type (as golden files name it) and the sizes of one sample.
    pub fn input_spec(&self, k: usize) -> Option<(&'static str, &[u64])> {
        let c = self.inputs.get(k)?;
        Some((dtype_name(c.dtype)?, &c.sample_shape))
    }

    /// Samples `first .. first + count` of every input, each as one tensor whose first axis is
    /// the sample (`[count, ...]`).
    pub fn read_inputs(&self, first: u64, count: u64) -> anyhow::Result<Vec<TensorValue>> {
        self.inputs
            .iter()
            .map(|c| {
                let bytes = self.read(c, first, count)?;
                let mut shape = vec![count];
                shape.extend(&c.sample_shape);
                Ok(TensorValue {
                    dtype: dtype_name(c.dtype).unwrap_or("other").to_string(),
                    shape,
                    data: decode(c.dtype, &bytes),
                })
            })
            .collect()
    }

    /// Labels `first .. first + count`.
    pub fn read_labels(&self, first: u64, count: u64) -> anyhow::Result<Option<Vec<i64>>> {
        let Some(c) = &self.labels else {
            return Ok(None);
        };
        let bytes = self.read(c, first, count)?;
        Ok(Some(
            bytes
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default()))
                .collect(),
        ))
    }

    fn read(&self, c: &Column, first: u64, count: u64) -> anyhow::Result<Vec<u8>> {
        if first + count > self.samples {
            bail!(
                "samples {first}..{} are past the set's {}",
                first + count,
                self.samples
            );
        }
        let mut buf = vec![0u8; (c.sample_bytes * count) as usize];
        self.file
            .read_exact_at(&mut buf, c.start + c.sample_bytes * first)
            .context("reading the evaluation set")?;
        Ok(buf)
    }
}

fn is_input(name: &str, n: usize) -> bool {
    name.strip_prefix("input_")
        .and_then(|k| k.parse::<usize>().ok())
        .is_some_and(|k| k < n && name == format!("input_{k}"))
}

/// The golden files' name for a safetensors element type ferry feeds.
fn dtype_name(d: Dtype) -> Option<&'static str> {
    Some(match d {
        Dtype::F32 => "float32",
        Dtype::F64 => "float64",
        Dtype::F16 => "float16",
        Dtype::BF16 => "bfloat16",
        Dtype::I8 => "int8",
        Dtype::I16 => "int16",
        Dtype::I32 => "int32",
        Dtype::I64 => "int64",
        Dtype::U8 => "uint8",
        Dtype::BOOL => "bool",
        _ => return None,
    })
}

/// Little-endian elements as `f64` (what [`TensorValue`] holds).
fn decode(d: Dtype, bytes: &[u8]) -> Vec<f64> {
    fn each<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<f64> {
        bytes
            .chunks_exact(N)
            .map(|c| f(c.try_into().unwrap_or([0; N])))
            .collect()
    }
    match d {
        Dtype::F32 => each(bytes, |b| f64::from(f32::from_le_bytes(b))),
        Dtype::F64 => each(bytes, f64::from_le_bytes),
        Dtype::F16 => each(bytes, |b| half::f16::from_le_bytes(b).to_f64()),
        Dtype::BF16 => each(bytes, |b| half::bf16::from_le_bytes(b).to_f64()),
        Dtype::I8 => each(bytes, |b: [u8; 1]| f64::from(b[0] as i8)),
        Dtype::I16 => each(bytes, |b| f64::from(i16::from_le_bytes(b))),
        Dtype::I32 => each(bytes, |b| f64::from(i32::from_le_bytes(b))),
        Dtype::I64 => each(bytes, |b| i64::from_le_bytes(b) as f64),
        Dtype::U8 | Dtype::BOOL => each(bytes, |b: [u8; 1]| f64::from(b[0])),
        _ => Vec::new(),
    }
}
