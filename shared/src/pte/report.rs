//! What the inspector reports: the extended header, segments, and per method the inputs,
//! outputs, delegate calls and kernel calls, with a one-line summary for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// The extended header that follows the FlatBuffers identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtendedHeader {
    /// Length of the header as written (32 today, 24 in older files).
    pub length: u32,
    /// Size of the FlatBuffers program data at the start of the file.
    pub program_size: u64,
    /// Where segment data starts (segment offsets are relative to this).
    pub segment_base_offset: u64,
    /// Total size of segment data (0 when the field is absent).
    pub segment_data_size: u64,
}

/// A data segment after the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Offset relative to the segment base.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// Where a delegate's processed blob lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataLocation {
    /// Inside the FlatBuffers program (`Program.backend_delegate_data`).
    Inline,
    /// In a data segment (`Program.segments`).
    Segment,
}

/// One delegate (lowered subgraph) of a method.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegateInfo {
    /// Backend id (`XnnpackBackend`, ...).
    pub backend: String,
    /// Where its blob lives.
    pub location: DataLocation,
    /// Index into the inline data or segment list.
    pub index: u32,
    /// Blob size in bytes, when the reference resolves.
    pub size: Option<u64>,
    /// The blob's first four bytes when printable (XNNPACK writes `XH00`, Vulkan `VH00`).
    pub magic: Option<String>,
    /// Compile spec keys.
    pub compile_specs: Vec<String>,
}

/// What one method (execution plan) contains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MethodReport {
    /// Method name (`forward`, ...).
    pub name: String,
    /// Number of inputs.
    pub inputs: usize,
    /// Number of outputs.
    pub outputs: usize,
    /// Number of values (EValues).
    pub values: usize,
    /// Number of chains.
    pub chains: usize,
    /// Instructions over all chains.
    pub instructions: u64,
    /// Number of entries in the operator table.
    pub operators: usize,
    /// The method's delegates in table order.
    pub delegates: Vec<DelegateInfo>,
    /// Delegate calls per backend id.
    pub delegate_calls: BTreeMap<String, u64>,
    /// Non-delegated kernel calls per operator (`name.overload`).
    pub kernel_calls: BTreeMap<String, u64>,
    /// Move, jump and free instructions.
    pub other_instructions: u64,
    /// Total bytes of this method's delegate blobs that could be resolved.
    pub delegate_data_bytes: u64,
    /// A one-line delegation summary for people.
    pub summary: String,
    /// Fully qualified names of the tensors whose data is not in the file but in a separate
    /// data file (`.ptd`) the runtime must be given, sorted.
    #[serde(default)]
    pub external_tensors: Vec<String>,
    /// The same tensors with the element type and dimensions the program declares for them,
    /// sorted by name (what their data in a `.ptd` must match).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_layouts: Vec<ExternalTensor>,
    /// The method's inputs and outputs as the program declares them.
    #[serde(default)]
    pub signature: Signature,
}

/// A method's inputs and outputs, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// The inputs.
    pub inputs: Vec<TensorSpec>,
    /// The outputs.
    pub outputs: Vec<TensorSpec>,
}

/// One input or output: a tensor's element type, sizes, dim order and how its sizes may vary;
/// for a value that is not a tensor, its kind (`int`, `bool`, `double`, ...) and no sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSpec {
    /// `float32`, `int64`, ... (as golden files name them), or a non-tensor value's kind.
    pub dtype: String,
    /// The sizes; a bounded dimension at its upper bound.
    pub shape: Vec<i64>,
    /// The dimension order (`[0, 1, 2, 3]` is contiguous; `[0, 2, 3, 1]` channels-last).
    #[serde(default)]
    pub dim_order: Vec<u8>,
    /// `static`, `bounded` (sizes up to `shape`) or `unbounded`.
    pub dynamism: Dynamism,
}

/// How a tensor's sizes may vary at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dynamism {
    /// Fixed sizes.
    Static,
    /// Any sizes up to the declared ones.
    Bounded,
    /// Any sizes.
    Unbounded,
    /// A kind a newer signer wrote that this reader does not know (sizes are then not
    /// checked).
    #[serde(other)]
    Other,
}

impl TensorSpec {
    /// Whether this is a tensor of a known element type (not a scalar value, and not an
    /// element type the inspector does not name).
    pub fn is_tensor(&self) -> bool {
        self.dtype != "other" && is_tensor_dtype(&self.dtype)
    }

    /// `float32[1, 16]`, `float32[<=8, 16] (bounded)`, `int`.
    pub fn describe(&self) -> String {
        if !is_tensor_dtype(&self.dtype) && self.shape.is_empty() {
            return self.dtype.clone();
        }
        let dims: Vec<String> = self
            .shape
            .iter()
            .map(|d| match self.dynamism {
                Dynamism::Static => d.to_string(),
                Dynamism::Bounded => format!("<={d}"),
                Dynamism::Unbounded | Dynamism::Other => "?".to_string(),
            })
            .collect();
        let contiguous = self
            .dim_order
            .iter()
            .enumerate()
            .all(|(i, d)| usize::from(*d) == i);
        format!(
            "{}[{}]{}",
            self.dtype,
            dims.join(", "),
            if contiguous {
                String::new()
            } else {
                format!(" dim order {:?}", self.dim_order)
            }
        )
    }
}

fn is_tensor_dtype(d: &str) -> bool {
    matches!(
        d,
        "uint8"
            | "int8"
            | "int16"
            | "int32"
            | "int64"
            | "float16"
            | "float32"
            | "float64"
            | "bool"
            | "bfloat16"
            | "other"
    )
}

/// A tensor a method reads from a data file, as the program declares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalTensor {
    /// Its fully qualified name (the key in the `.ptd`).
    pub name: String,
    /// ExecuTorch's scalar type code.
    pub scalar_type: i8,
    /// Its dimensions.
    pub sizes: Vec<i32>,
}

impl MethodReport {
    /// Every backend this method calls.
    pub fn backends(&self) -> impl Iterator<Item = &str> {
        self.delegate_calls.keys().map(String::as_str)
    }

    /// Total kernel calls that are not delegated.
    pub fn kernel_call_count(&self) -> u64 {
        self.kernel_calls.values().sum()
    }
}

/// A named blob in a segment (weights shared with backends).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedData {
    /// The key.
    pub key: String,
    /// Segment index.
    pub segment_index: u32,
    /// Size of that segment, when the index resolves.
    pub size: Option<u64>,
}

/// Everything the inspector learned about a `.pte`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PteReport {
    /// The FlatBuffers file identifier (`ET12`).
    pub file_identifier: String,
    /// Total file size in bytes.
    pub file_size: u64,
    /// The extended header, when present.
    pub extended_header: Option<ExtendedHeader>,
    /// `Program.version` (0 today).
    pub schema_version: u32,
    /// The methods.
    pub methods: Vec<MethodReport>,
    /// Data segments.
    pub segments: Vec<Segment>,
    /// Number of constant tensors in the constant segment (including the reserved slot 0).
    pub constant_tensors: usize,
    /// Size of the constant segment in bytes (0 when absent).
    pub constant_segment_size: u64,
    /// Named data entries.
    pub named_data: Vec<NamedData>,
    /// Bytes of delegate data stored inline.
    pub inline_delegate_bytes: u64,
    /// Number of mutable data segment tables.
    pub mutable_data_segments: usize,
}

impl PteReport {
    /// The union of the backends called by any method, sorted.
    pub fn backends(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .methods
            .iter()
            .flat_map(|m| m.backends().map(str::to_string))
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// The method named `name`.
    pub fn method(&self, name: &str) -> Option<&MethodReport> {
        self.methods.iter().find(|m| m.name == name)
    }

    /// A human-readable multi-line report.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "ExecuTorch program ({}), schema version {}, {} bytes",
            self.file_identifier, self.schema_version, self.file_size
        );
        if let Some(h) = &self.extended_header {
            let _ = writeln!(
                s,
                "  program {} bytes, segments at {} ({} bytes)",
                h.program_size, h.segment_base_offset, h.segment_data_size
            );
        }
        let _ = writeln!(
            s,
            "  {} segment(s), {} constant tensor(s) in {} bytes, {} named data, {} inline delegate bytes",
            self.segments.len(),
            self.constant_tensors,
            self.constant_segment_size,
            self.named_data.len(),
            self.inline_delegate_bytes
        );
        for m in &self.methods {
            let _ = writeln!(
                s,
                "method {}: {} input(s), {} output(s), {} instruction(s)",
                m.name, m.inputs, m.outputs, m.instructions
            );
            for (what, list) in [
                ("input", &m.signature.inputs),
                ("output", &m.signature.outputs),
            ] {
                for (i, t) in list.iter().enumerate() {
                    let _ = writeln!(s, "  {what} {i}: {}", t.describe());
                }
            }
            let _ = writeln!(s, "  {}", m.summary);
            for d in &m.delegates {
                let _ = writeln!(
                    s,
                    "  delegate {:<18} {:>10} bytes  {:?} #{}{}",
                    d.backend,
                    d.size.map_or("?".to_string(), |n| n.to_string()),
                    d.location,
                    d.index,
                    d.magic
                        .as_ref()
                        .map_or(String::new(), |m| format!("  magic {m}"))
                );
            }
            for (op, n) in &m.kernel_calls {
                let _ = writeln!(s, "  kernel   {op:<40} x{n}");
            }
            if !m.external_tensors.is_empty() {
                let _ = writeln!(
                    s,
                    "  {} in a separate data file (.ptd): {}",
                    plural(m.external_tensors.len() as u64, "tensor"),
                    m.external_tensors.join(", ")
                );
            }
        }
        s
    }
}

pub(super) fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

pub(super) fn summarize(
    delegate_calls: &BTreeMap<String, u64>,
    kernel_calls: &BTreeMap<String, u64>,
) -> String {
    let mut parts: Vec<String> = delegate_calls
        .iter()
        .map(|(b, n)| plural(*n, &format!("{b} call")))
        .collect();
    let kernels: u64 = kernel_calls.values().sum();
    if kernels > 0 {
        let ops: Vec<String> = kernel_calls
            .iter()
            .map(|(op, n)| {
                if *n == 1 {
                    op.clone()
                } else {
                    format!("{op} x{n}")
                }
            })
            .collect();
        parts.push(format!(
            "{}: {}",
            plural(kernels, "portable kernel call"),
            ops.join(", ")
        ));
    }
    if parts.is_empty() {
        "no delegate or kernel calls".to_string()
    } else {
        parts.join(", ")
    }
}

/// A delegate blob's magic: FlatBuffers-style blobs (XNNPACK `XH00`, Vulkan `VH00`) carry it at
/// bytes 4..8, others at 0..4. Only magics shaped like ExecuTorch's (two capital letters, two
/// digits) are reported, so arbitrary data is not mistaken for one.
pub(super) fn blob_magic(head: &[u8]) -> Option<String> {
    let printable = |m: &[u8]| {
        m.len() == 4
            && m[..2].iter().all(u8::is_ascii_uppercase)
            && m[2..].iter().all(u8::is_ascii_digit)
    };
    [head.get(4..8), head.get(..4)]
        .into_iter()
        .flatten()
        .find(|m| printable(m))
        .map(|m| String::from_utf8_lossy(m).into_owned())
}
