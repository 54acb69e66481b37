//! The `.pte` inspector: what an ExecuTorch program really contains, from its bytes alone.
//!
//! A `.pte` file is a FlatBuffers `Program` (file identifier `ET12`) followed by data segments.
//! Bytes 8..40 hold an extended header (`eh00`, header length, program size, segment base offset,
//! segment data size). The inspector reads the program with its own bounds-checked reader and
//! reports, per method (execution plan): the inputs and outputs, instruction count, delegate
//! calls per backend id and non-delegated kernel calls per operator. That is the audit
//! publishing needs, because partitioners "fail open": an op a delegate declines silently runs
//! on portable kernels, and a variant labelled "Vulkan" may call no Vulkan at all.
//!
//! # Guarantees
//! [`inspect`] never panics, never allocates more than a small multiple of its input, and does
//! a bounded amount of work ([`PteLimits::max_work`]) whatever the bytes are: offsets that
//! point backwards, loop, or overlap are errors or at worst cost budget, never a hang.
//!
//! [`required_prefix`] tells a streaming caller how many leading bytes it needs: the
//! FlatBuffers part only, not the (possibly huge) segments.

mod fb;

use crate::errors::ErrorCode;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use fb::{Budget, Buf, Table};

/// The FlatBuffers file identifier of the program schema this inspector understands.
pub const FILE_IDENTIFIER: &[u8; 4] = b"ET12";
/// Magic of the extended header.
pub const EXTENDED_HEADER_MAGIC: &[u8; 4] = b"eh00";
/// The highest `Program.version` known to this inspector (and to the 1.5.x runtime).
pub const KNOWN_SCHEMA_VERSION: u32 = 0;

/// Documented limits. Every one is enforced while reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PteLimits {
    /// Largest FlatBuffers part (the program without segments), default 512 MiB.
    pub max_program_size: u64,
    /// Most methods (execution plans), default 1,024.
    pub max_methods: usize,
    /// Most operators in one method, default 65,536.
    pub max_operators: usize,
    /// Most delegates in one method, default 65,536.
    pub max_delegates: usize,
    /// Most instructions over all methods and chains, default 8,000,000.
    pub max_instructions: u64,
    /// Most segments and named-data entries, default 1,000,000 each.
    pub max_entries: usize,
    /// Longest string (method, operator, backend, key names), default 4 KiB.
    pub max_string: usize,
    /// Total bytes of strings read (names are copied into the report), default 16 MiB.
    pub max_string_bytes: u64,
    /// Work units for one inspection (a table or vector visit is one; a string costs one per
    /// 64 bytes), default 64,000,000.
    pub max_work: u64,
}

impl Default for PteLimits {
    fn default() -> Self {
        Self {
            max_program_size: 512 << 20,
            max_methods: 1024,
            max_operators: 65_536,
            max_delegates: 65_536,
            max_instructions: 8_000_000,
            max_entries: 1_000_000,
            max_string: 4096,
            max_string_bytes: 16 << 20,
            max_work: 64_000_000,
        }
    }
}

/// Why bytes are not a `.pte` the inspector can read. Each variant has a stable
/// [`PteError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PteError {
    /// Shorter than the smallest possible program, or shorter than its header says.
    #[error("truncated .pte: {0}")]
    Truncated(String),
    /// The FlatBuffers file identifier is not `ET12`.
    #[error("not an ExecuTorch program: file identifier is {found:?}, expected \"ET12\"")]
    NotAProgram {
        /// The four identifier bytes, escaped.
        found: String,
    },
    /// The extended header is inconsistent.
    #[error("bad extended header: {0}")]
    BadHeader(String),
    /// A reference inside the program is out of bounds or of the wrong shape.
    #[error("malformed program at byte {offset}: {why}")]
    Malformed {
        /// Byte offset where the problem was found.
        offset: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// A documented limit was exceeded.
    #[error("limit exceeded: {what} (limit {limit})")]
    LimitExceeded {
        /// Which limit.
        what: &'static str,
        /// Its value.
        limit: u64,
    },
}

impl PteError {
    /// Stable machine-readable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            PteError::Truncated(_) => ErrorCode::PteTruncated,
            PteError::NotAProgram { .. } => ErrorCode::PteNotAProgram,
            PteError::BadHeader(_) => ErrorCode::PteBadHeader,
            PteError::Malformed { .. } => ErrorCode::PteMalformed,
            PteError::LimitExceeded { .. } => ErrorCode::PteLimitExceeded,
        }
    }
}

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
        }
        s
    }
}

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn summarize(
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
fn blob_magic(head: &[u8]) -> Option<String> {
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

/// How many leading bytes of a file [`inspect_prefix`] needs, judged from its first 40 bytes
/// (the FlatBuffers part; segments are not needed). Errors when the header is not a `.pte`.
pub fn required_prefix(head: &[u8], limits: &PteLimits) -> Result<u64, PteError> {
    let header = parse_header(head, None)?;
    match header {
        Some(h) => {
            if h.program_size > limits.max_program_size {
                return Err(PteError::LimitExceeded {
                    what: "program size",
                    limit: limits.max_program_size,
                });
            }
            Ok(h.program_size)
        }
        None => Ok(limits.max_program_size),
    }
}

fn parse_header(data: &[u8], file_size: Option<u64>) -> Result<Option<ExtendedHeader>, PteError> {
    if data.len() < 8 {
        return Err(PteError::Truncated(format!(
            "{} bytes; a program needs at least 8",
            data.len()
        )));
    }
    if &data[4..8] != FILE_IDENTIFIER {
        return Err(PteError::NotAProgram {
            found: data[4..8].escape_ascii().to_string(),
        });
    }
    if data.len() < 16 || &data[8..12] != EXTENDED_HEADER_MAGIC {
        return Ok(None);
    }
    let u32_at = |at: usize| -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&data[at..at + 4]);
        u32::from_le_bytes(b)
    };
    let length = u32_at(12);
    if !(24..=1024).contains(&length) {
        return Err(PteError::BadHeader(format!(
            "header length {length} is not in 24..=1024"
        )));
    }
    let need = 8 + length.min(32) as usize;
    if data.len() < need {
        return Err(PteError::Truncated(format!(
            "{} bytes; the extended header needs {need}",
            data.len()
        )));
    }
    let u64_at = |at: usize| -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&data[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let h = ExtendedHeader {
        length,
        program_size: u64_at(16),
        segment_base_offset: u64_at(24),
        segment_data_size: if length >= 32 { u64_at(32) } else { 0 },
    };
    if h.program_size < need as u64 {
        return Err(PteError::BadHeader(format!(
            "program size {} is smaller than the header",
            h.program_size
        )));
    }
    if let Some(size) = file_size {
        if h.program_size > size {
            return Err(PteError::Truncated(format!(
                "header says the program is {} bytes, the file has {size}",
                h.program_size
            )));
        }
        let end = h.segment_base_offset.saturating_add(h.segment_data_size);
        if h.segment_data_size > 0 && end > size {
            return Err(PteError::Truncated(format!(
                "header says segments end at byte {end}, the file has {size}"
            )));
        }
    }
    if h.segment_base_offset != 0 && h.segment_base_offset < h.program_size {
        return Err(PteError::BadHeader(format!(
            "segment base offset {} lies inside the program ({} bytes)",
            h.segment_base_offset, h.program_size
        )));
    }
    Ok(Some(h))
}

/// Inspects a whole `.pte` file held in memory, with default limits.
pub fn inspect(bytes: &[u8]) -> Result<PteReport, PteError> {
    inspect_with(bytes, &PteLimits::default())
}

/// Inspects a whole `.pte` file held in memory.
pub fn inspect_with(bytes: &[u8], limits: &PteLimits) -> Result<PteReport, PteError> {
    inspect_prefix(bytes, bytes.len() as u64, limits)
}

/// Inspects a file of `file_size` bytes of which `prefix` holds at least the first
/// [`required_prefix`] bytes. Segment sizes are checked against `file_size`; delegate blob
/// magics are read only where the prefix holds them.
pub fn inspect_prefix(
    prefix: &[u8],
    file_size: u64,
    limits: &PteLimits,
) -> Result<PteReport, PteError> {
    if (prefix.len() as u64) > file_size {
        return Err(PteError::BadHeader("prefix is longer than the file".into()));
    }
    let header = parse_header(prefix, Some(file_size))?;
    let program_len = match &header {
        Some(h) => h.program_size,
        None => prefix.len() as u64,
    };
    if program_len > limits.max_program_size {
        return Err(PteError::LimitExceeded {
            what: "program size",
            limit: limits.max_program_size,
        });
    }
    if program_len > prefix.len() as u64 {
        return Err(PteError::Truncated(format!(
            "the program is {program_len} bytes, only {} were given",
            prefix.len()
        )));
    }
    let buf = Buf {
        data: &prefix[..program_len as usize],
    };
    let mut budget = Budget::new(limits.max_work, limits.max_string_bytes);
    let root = buf.root(&mut budget)?;
    let mut r = Reader {
        limits,
        budget,
        instructions: 0,
    };

    let schema_version = root.u32(0, 0)?;

    let segments = match root.vector(4, 4, &mut r.budget)? {
        Some(v) => {
            r.entries(v.len)?;
            let mut out = Vec::with_capacity(v.len);
            for i in 0..v.len {
                let t = v.table(i, &mut r.budget)?;
                out.push(Segment {
                    offset: t.u64(0, 0)?,
                    size: t.u64(1, 0)?,
                });
            }
            out
        }
        None => Vec::new(),
    };
    if !segments.is_empty() {
        let base = header.map_or(0, |h| h.segment_base_offset);
        if base == 0 {
            return Err(PteError::BadHeader(
                "the program has segments but no segment base offset".into(),
            ));
        }
        for (i, s) in segments.iter().enumerate() {
            let end = base
                .checked_add(s.offset)
                .and_then(|x| x.checked_add(s.size))
                .unwrap_or(u64::MAX);
            if end > file_size {
                return Err(PteError::Truncated(format!(
                    "segment {i} ends at byte {end}, the file has {file_size}"
                )));
            }
        }
    }
    let segment_bytes = |index: u32| -> Option<(u64, Option<&[u8]>)> {
        let s = segments.get(index as usize)?;
        let base = header.map_or(0, |h| h.segment_base_offset);
        let start = base.checked_add(s.offset)? as usize;
        let head = prefix.get(start..start.checked_add(8)?);
        Some((s.size, head))
    };

    let inline_data = match root.vector(3, 4, &mut r.budget)? {
        Some(v) => {
            r.entries(v.len)?;
            let mut out = Vec::with_capacity(v.len);
            for i in 0..v.len {
                let t = v.table(i, &mut r.budget)?;
                let data = match t.vector(0, 1, &mut r.budget)? {
                    Some(d) => d.raw()?,
                    None => &[],
                };
                out.push(data);
            }
            out
        }
        None => Vec::new(),
    };

    let mut methods = Vec::new();
    if let Some(plans) = root.vector(1, 4, &mut r.budget)? {
        if plans.len > limits.max_methods {
            return Err(PteError::LimitExceeded {
                what: "methods",
                limit: limits.max_methods as u64,
            });
        }
        for i in 0..plans.len {
            let plan = plans.table(i, &mut r.budget)?;
            methods.push(r.method(&plan, &inline_data, &segment_bytes)?);
        }
    }

    let (constant_tensors, constant_segment_size) = match root.table(5, &mut r.budget)? {
        Some(t) => {
            let index = t.u32(0, 0)?;
            let count = t.vector(1, 8, &mut r.budget)?.map_or(0, |v| v.len);
            let size = if count > 0 {
                segments.get(index as usize).map_or(0, |s| s.size)
            } else {
                0
            };
            (count, size)
        }
        None => (0, 0),
    };

    let mutable_data_segments = root.vector(6, 4, &mut r.budget)?.map_or(0, |v| v.len);

    let named_data = match root.vector(7, 4, &mut r.budget)? {
        Some(v) => {
            r.entries(v.len)?;
            let mut out = Vec::with_capacity(v.len.min(4096));
            for i in 0..v.len {
                let t = v.table(i, &mut r.budget)?;
                let key = t.string(0, limits.max_string, &mut r.budget)?.unwrap_or("");
                let segment_index = t.u32(1, 0)?;
                out.push(NamedData {
                    key: key.to_string(),
                    segment_index,
                    size: segments.get(segment_index as usize).map(|s| s.size),
                });
            }
            out
        }
        None => Vec::new(),
    };

    Ok(PteReport {
        file_identifier: String::from_utf8_lossy(FILE_IDENTIFIER).into_owned(),
        file_size,
        extended_header: header,
        schema_version,
        methods,
        segments,
        constant_tensors,
        constant_segment_size,
        named_data,
        inline_delegate_bytes: inline_data.iter().map(|d| d.len() as u64).sum(),
        mutable_data_segments,
    })
}

struct Reader<'l> {
    limits: &'l PteLimits,
    budget: Budget,
    instructions: u64,
}

// Union tags of `InstructionArguments`.
const KERNEL_CALL: u8 = 1;
const DELEGATE_CALL: u8 = 2;

impl Reader<'_> {
    fn entries(&self, n: usize) -> Result<(), PteError> {
        if n > self.limits.max_entries {
            return Err(PteError::LimitExceeded {
                what: "segments or named data entries",
                limit: self.limits.max_entries as u64,
            });
        }
        Ok(())
    }

    fn method<'a>(
        &mut self,
        plan: &Table<'a>,
        inline_data: &[&'a [u8]],
        segment_bytes: &dyn Fn(u32) -> Option<(u64, Option<&'a [u8]>)>,
    ) -> Result<MethodReport, PteError> {
        let max_string = self.limits.max_string;
        let name = plan
            .string(0, max_string, &mut self.budget)?
            .unwrap_or("")
            .to_string();
        let values = plan.vector(2, 4, &mut self.budget)?.map_or(0, |v| v.len);
        let inputs = plan.vector(3, 4, &mut self.budget)?.map_or(0, |v| v.len);
        let outputs = plan.vector(4, 4, &mut self.budget)?.map_or(0, |v| v.len);

        let mut operators = Vec::new();
        if let Some(ops) = plan.vector(6, 4, &mut self.budget)? {
            if ops.len > self.limits.max_operators {
                return Err(PteError::LimitExceeded {
                    what: "operators in one method",
                    limit: self.limits.max_operators as u64,
                });
            }
            for i in 0..ops.len {
                let op = ops.table(i, &mut self.budget)?;
                let n = op.string(0, max_string, &mut self.budget)?.unwrap_or("");
                let overload = op.string(1, max_string, &mut self.budget)?.unwrap_or("");
                operators.push(if overload.is_empty() {
                    n.to_string()
                } else {
                    format!("{n}.{overload}")
                });
            }
        }

        let mut delegates = Vec::new();
        if let Some(ds) = plan.vector(7, 4, &mut self.budget)? {
            if ds.len > self.limits.max_delegates {
                return Err(PteError::LimitExceeded {
                    what: "delegates in one method",
                    limit: self.limits.max_delegates as u64,
                });
            }
            for i in 0..ds.len {
                let d = ds.table(i, &mut self.budget)?;
                let backend = d
                    .string(0, max_string, &mut self.budget)?
                    .unwrap_or("")
                    .to_string();
                let (location, index) = match d.table(1, &mut self.budget)? {
                    Some(r) => (r.u8(0, 0)?, r.u32(1, 0)?),
                    None => (0, 0),
                };
                let (location, size, head) = match location {
                    0 => {
                        let data = inline_data.get(index as usize);
                        (
                            DataLocation::Inline,
                            data.map(|d| d.len() as u64),
                            data.and_then(|d| d.get(..8)),
                        )
                    }
                    1 => {
                        let seg = segment_bytes(index);
                        (
                            DataLocation::Segment,
                            seg.map(|s| s.0),
                            seg.and_then(|s| s.1),
                        )
                    }
                    _ => {
                        return Err(PteError::Malformed {
                            offset: 0,
                            why: "delegate data location is neither inline nor segment",
                        });
                    }
                };
                let magic = head.and_then(blob_magic);
                let mut compile_specs = Vec::new();
                if let Some(specs) = d.vector(2, 4, &mut self.budget)? {
                    for j in 0..specs.len {
                        let spec = specs.table(j, &mut self.budget)?;
                        if let Some(k) = spec.string(0, max_string, &mut self.budget)? {
                            compile_specs.push(k.to_string());
                        }
                    }
                }
                delegates.push(DelegateInfo {
                    backend,
                    location,
                    index,
                    size,
                    magic,
                    compile_specs,
                });
            }
        }

        let mut delegate_calls = BTreeMap::new();
        let mut kernel_calls = BTreeMap::new();
        let mut other_instructions = 0u64;
        let mut instructions = 0u64;
        let mut chain_count = 0usize;
        if let Some(chains) = plan.vector(5, 4, &mut self.budget)? {
            chain_count = chains.len;
            for c in 0..chains.len {
                let chain = chains.table(c, &mut self.budget)?;
                let Some(instrs) = chain.vector(2, 4, &mut self.budget)? else {
                    continue;
                };
                self.instructions = self.instructions.saturating_add(instrs.len as u64);
                if self.instructions > self.limits.max_instructions {
                    return Err(PteError::LimitExceeded {
                        what: "instructions",
                        limit: self.limits.max_instructions,
                    });
                }
                instructions += instrs.len as u64;
                for k in 0..instrs.len {
                    let ins = instrs.table(k, &mut self.budget)?;
                    let tag = ins.u8(0, 0)?;
                    match tag {
                        KERNEL_CALL | DELEGATE_CALL => {
                            let Some(args) = ins.table(1, &mut self.budget)? else {
                                return Err(PteError::Malformed {
                                    offset: 0,
                                    why: "instruction has a type but no arguments",
                                });
                            };
                            let index = args.i32(0, 0)?;
                            if tag == KERNEL_CALL {
                                let op = usize::try_from(index)
                                    .ok()
                                    .and_then(|i| operators.get(i))
                                    .ok_or(PteError::Malformed {
                                        offset: 0,
                                        why: "kernel call names an operator that does not exist",
                                    })?;
                                *kernel_calls.entry(op.clone()).or_insert(0u64) += 1;
                            } else {
                                let d = usize::try_from(index)
                                    .ok()
                                    .and_then(|i| delegates.get(i))
                                    .ok_or(PteError::Malformed {
                                        offset: 0,
                                        why: "delegate call names a delegate that does not exist",
                                    })?;
                                *delegate_calls.entry(d.backend.clone()).or_insert(0u64) += 1;
                            }
                        }
                        3..=5 => other_instructions += 1,
                        _ => {
                            return Err(PteError::Malformed {
                                offset: 0,
                                why: "unknown instruction type",
                            });
                        }
                    }
                }
            }
        }
        let summary = summarize(&delegate_calls, &kernel_calls);
        let delegate_data_bytes = delegates.iter().filter_map(|d| d.size).sum();
        Ok(MethodReport {
            name,
            inputs,
            outputs,
            values,
            chains: chain_count,
            instructions,
            operators: operators.len(),
            delegates,
            delegate_calls,
            kernel_calls,
            other_instructions,
            delegate_data_bytes,
            summary,
        })
    }
}

#[cfg(test)]
mod tests;

/// Checks that a variant declared as `delegate` with backend list `declared` is what its
/// program really contains ("partitioners fail open": a variant labelled Vulkan may call no
/// Vulkan at all). Returns why not, for people, or `None` when it matches.
pub fn delegation_mismatch(
    variant: &str,
    delegate: crate::manifest::Delegate,
    declared: &[crate::names::BackendId],
    report: &PteReport,
) -> Option<String> {
    use std::collections::BTreeSet;
    let found: BTreeSet<String> = report.backends().into_iter().collect();
    let declared: BTreeSet<String> = declared.iter().map(|b| b.to_string()).collect();
    let summary = report
        .methods
        .iter()
        .map(|m| format!("{}: {}", m.name, m.summary))
        .collect::<Vec<_>>()
        .join("; ");
    let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
    match delegate.backend_id() {
        None if !found.is_empty() => {
            return Some(format!(
                "variant {variant} is declared portable but calls {} ({summary})",
                list(&found)
            ));
        }
        Some(id) if !found.contains(id) => {
            return Some(format!(
                "variant {variant} is declared {delegate} but its program never calls {id} \
                 ({summary}); the partitioner probably declined the graph"
            ));
        }
        _ => {}
    }
    if found != declared {
        return Some(format!(
            "variant {variant} lists backends [{}] but its program calls [{}]",
            list(&declared),
            list(&found)
        ));
    }
    None
}
