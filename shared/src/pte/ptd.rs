//! The `.ptd` reader: ExecuTorch's FlatTensor data files, which hold a program's weights
//! outside the `.pte` (programs exported with `external_constants=True`).
//!
//! A `.ptd` is a FlatBuffers `FlatTensor` (file identifier `FT01`) with a header at byte 8:
//! magic `FH01`, u32 header length, u64 flatbuffer offset, u64 flatbuffer size, u64 segment
//! base offset, u64 segment data size. `FlatTensor` fields by id: 0 version, 1 segments
//! (`DataSegment`: 0 offset, 1 size), 2 named_data (`NamedData`: 0 key, 1 segment_index,
//! 2 tensor_layout; `TensorLayout`: 0 scalar_type, 1 sizes, 2 dim_order).

use serde::{Deserialize, Serialize};

use super::error::{PteError, PteLimits};
use super::fb::{Budget, Buf};

/// The file identifier of a FlatTensor file.
pub const PTD_IDENTIFIER: &[u8; 4] = b"FT01";

/// One named tensor in a `.ptd`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtdTensor {
    /// The name programs look it up by (`fc1.weight`).
    pub key: String,
    /// ExecuTorch's scalar type code.
    pub scalar_type: i8,
    /// The element type's name (`float32`, `int8`, ...; `other` for rarer ones).
    #[serde(default)]
    pub dtype: String,
    /// Dimensions.
    pub sizes: Vec<i32>,
    /// Bytes of its data segment.
    pub bytes: u64,
}

/// What a `.ptd` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtdReport {
    /// The FlatTensor schema version.
    pub version: u32,
    /// Its named tensors, sorted by key.
    pub tensors: Vec<PtdTensor>,
    /// Total bytes of the data segments.
    pub data_bytes: u64,
}

impl PtdReport {
    /// The keys, sorted.
    pub fn keys(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.key.as_str()).collect()
    }
}

/// Whether `bytes` look like a FlatTensor file (its identifier).
pub fn is_ptd(bytes: &[u8]) -> bool {
    bytes.get(4..8) == Some(PTD_IDENTIFIER.as_slice())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Reads a whole `.ptd`: every named tensor and that each data segment lies inside the file.
pub fn inspect_ptd(bytes: &[u8]) -> Result<PtdReport, PteError> {
    inspect_ptd_prefix(bytes, bytes.len() as u64)
}

/// Checks the 48-byte header at the start of a `.ptd` and returns how many leading bytes
/// [`inspect_ptd_prefix`] needs (the end of the flatbuffer), so that a file in an object store
/// is read without its data segments.
pub fn ptd_required_prefix(head: &[u8]) -> Result<u64, PteError> {
    let h = ptd_header(head)?;
    Ok(h.fb_end)
}

/// Where the parts of a `.ptd` are, from its header.
struct PtdHeader {
    fb_end: u64,
    base: u64,
    data_size: u64,
}

fn ptd_header(head: &[u8]) -> Result<PtdHeader, PteError> {
    if head.len() < 48 {
        return Err(PteError::Truncated(format!(
            "{} bytes; a .ptd header needs 48",
            head.len()
        )));
    }
    if !is_ptd(head) {
        let found = head[4..8].escape_ascii().to_string();
        let hint = if &head[4..8] == b"ET12" {
            " (this is a program, .pte)"
        } else {
            ""
        };
        return Err(PteError::BadHeader(format!(
            "file identifier is {found:?}, expected \"FT01\" (a .ptd data file){hint}"
        )));
    }
    if &head[8..12] != b"FH01" {
        return Err(PteError::BadHeader("no FH01 header at byte 8".into()));
    }
    let (fb_offset, fb_size) = (u64_at(head, 16), u64_at(head, 24));
    let (base, data_size) = (u64_at(head, 32), u64_at(head, 40));
    let fb_end = fb_offset
        .checked_add(fb_size)
        .ok_or_else(|| PteError::BadHeader("the flatbuffer's offset and size overflow".into()))?;
    if fb_end > PteLimits::default().max_program_size {
        return Err(PteError::LimitExceeded {
            what: "program size",
            limit: PteLimits::default().max_program_size,
        });
    }
    Ok(PtdHeader {
        fb_end,
        base,
        data_size,
    })
}

/// Reads a `.ptd` of `size` bytes from its first bytes (at least
/// [`ptd_required_prefix`] of them): every named tensor, and that each data segment lies inside
/// the file.
pub fn inspect_ptd_prefix(prefix: &[u8], size: u64) -> Result<PtdReport, PteError> {
    let limits = PteLimits::default();
    let PtdHeader {
        fb_end,
        base,
        data_size,
    } = ptd_header(prefix)?;
    if fb_end > size {
        return Err(PteError::Truncated(format!(
            "the flatbuffer ends past the file's {size} bytes"
        )));
    }
    if (prefix.len() as u64) < fb_end {
        return Err(PteError::Truncated(format!(
            "{} bytes read; the flatbuffer ends at {fb_end}",
            prefix.len()
        )));
    }
    if base.checked_add(data_size).is_none_or(|e| e > size) {
        return Err(PteError::Truncated(format!(
            "the data ends past the file's {size} bytes"
        )));
    }
    let buf = Buf {
        data: &prefix[..fb_end as usize],
    };
    let mut budget = Budget::new(limits.max_work, limits.max_string_bytes);
    let root = buf.root(&mut budget)?;
    let version = root.u32(0, 0)?;
    let mut segments = Vec::new();
    if let Some(v) = root.vector(1, 4, &mut budget)? {
        if v.len > limits.max_entries {
            return Err(PteError::LimitExceeded {
                what: "segments or named data entries",
                limit: limits.max_entries as u64,
            });
        }
        for i in 0..v.len {
            let t = v.table(i, &mut budget)?;
            let (offset, len) = (t.u64(0, 0)?, t.u64(1, 0)?);
            if offset.checked_add(len).is_none_or(|e| e > data_size) {
                return Err(PteError::Truncated(format!(
                    "data segment {i} ends past the data's {data_size} bytes"
                )));
            }
            segments.push(len);
        }
    }
    let mut tensors = Vec::new();
    if let Some(v) = root.vector(2, 4, &mut budget)? {
        if v.len > limits.max_entries {
            return Err(PteError::LimitExceeded {
                what: "segments or named data entries",
                limit: limits.max_entries as u64,
            });
        }
        for i in 0..v.len {
            let t = v.table(i, &mut budget)?;
            let key = t
                .string(0, limits.max_string, &mut budget)?
                .unwrap_or("")
                .to_string();
            let index = t.u32(1, 0)? as usize;
            let bytes = *segments.get(index).ok_or_else(|| {
                PteError::BadHeader(format!(
                    "{key:?} names data segment {index}, which is missing"
                ))
            })?;
            let (scalar_type, sizes) = match t.table(2, &mut budget)? {
                Some(layout) => {
                    let sizes = match layout.vector(1, 4, &mut budget)? {
                        Some(s) => s
                            .raw()?
                            .chunks_exact(4)
                            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                            .collect(),
                        None => Vec::new(),
                    };
                    (layout.u8(0, 0)? as i8, sizes)
                }
                None => (0, Vec::new()),
            };
            tensors.push(PtdTensor {
                key,
                scalar_type,
                dtype: scalar_type_name(scalar_type).to_string(),
                sizes,
                bytes,
            });
        }
    }
    tensors.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(PtdReport {
        version,
        tensors,
        data_bytes: data_size,
    })
}

/// The tensors `program`'s methods keep outside the file that none of `data` provides, sorted
/// and without repeats (empty: every external tensor has its data).
pub fn missing_external_tensors(
    program: &super::report::PteReport,
    data: &[PtdReport],
) -> Vec<String> {
    let provided: std::collections::BTreeSet<&str> = data
        .iter()
        .flat_map(|d| d.tensors.iter().map(|t| t.key.as_str()))
        .collect();
    let missing: std::collections::BTreeSet<&str> = program
        .methods
        .iter()
        .flat_map(|m| m.external_tensors.iter().map(String::as_str))
        .filter(|k| !provided.contains(k))
        .collect();
    missing.into_iter().map(str::to_string).collect()
}

/// What a program's data files lack or get wrong (see [`check_data_files`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DataFileProblems {
    /// Tensors the program reads from outside that no data file provides, sorted.
    pub missing: Vec<String>,
    /// Each tensor two data files both provide (ExecuTorch refuses to load a program whose
    /// data maps repeat a name) and each tensor whose element type or dimensions differ from
    /// what the program declares, described for people.
    pub conflicts: Vec<String>,
}

impl DataFileProblems {
    /// Nothing lacking, nothing wrong.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.conflicts.is_empty()
    }
}

/// Checks `data` (each data file's name and report) against what `program` reads from outside:
/// every external tensor provided, by exactly one file, with the element type and dimensions
/// the program declares.
pub fn check_data_files(
    program: &super::report::PteReport,
    data: &[(&str, &PtdReport)],
) -> DataFileProblems {
    let mut problems = DataFileProblems {
        missing: missing_external_tensors(
            program,
            &data.iter().map(|(_, r)| (*r).clone()).collect::<Vec<_>>(),
        ),
        conflicts: Vec::new(),
    };
    let mut seen: std::collections::BTreeMap<&str, (&str, &PtdTensor)> = Default::default();
    for (file, report) in data {
        for t in &report.tensors {
            if let Some((first, _)) = seen.get(t.key.as_str()) {
                problems.conflicts.push(format!(
                    "{} is in both {first} and {file} (the runtime refuses a name given twice)",
                    t.key
                ));
            } else {
                seen.insert(t.key.as_str(), (file, t));
            }
        }
    }
    let mut checked = std::collections::BTreeSet::new();
    for layout in program.methods.iter().flat_map(|m| &m.external_layouts) {
        if !checked.insert(layout.name.as_str()) {
            continue;
        }
        if let Some((file, t)) = seen.get(layout.name.as_str())
            && (t.scalar_type != layout.scalar_type || t.sizes != layout.sizes)
        {
            problems.conflicts.push(format!(
                "{}: the program declares {} {:?}, {file} holds {} {:?}",
                layout.name,
                scalar_type_name(layout.scalar_type),
                layout.sizes,
                scalar_type_name(t.scalar_type),
                t.sizes
            ));
        }
    }
    problems
}

/// PyTorch's name of an ExecuTorch scalar type code, for the common ones.
pub fn scalar_type_name(code: i8) -> &'static str {
    match code {
        0 => "uint8",
        1 => "int8",
        2 => "int16",
        3 => "int32",
        4 => "int64",
        5 => "float16",
        6 => "float32",
        7 => "float64",
        11 => "bool",
        15 => "bfloat16",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &[u8] = include_bytes!("../../../tests/fixtures/pte/mlp-external-portable.ptd");

    #[test]
    fn the_exporters_data_file_lists_its_tensors() {
        let r = inspect_ptd(FIXTURE).expect("valid");
        assert_eq!(
            r.keys(),
            ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
        );
        let w = &r.tensors[1];
        assert_eq!(
            (w.sizes.as_slice(), scalar_type_name(w.scalar_type)),
            (&[32, 16][..], "float32")
        );
        assert!(w.bytes >= 32 * 16 * 4, "{w:?}");
    }

    #[test]
    fn the_header_names_the_prefix_that_is_enough_to_read_it() {
        let need = ptd_required_prefix(FIXTURE).expect("header") as usize;
        assert!(need < FIXTURE.len(), "the data segments come after {need}");
        let size = FIXTURE.len() as u64;
        assert_eq!(
            inspect_ptd_prefix(&FIXTURE[..need], size).expect("enough"),
            inspect_ptd(FIXTURE).expect("whole")
        );
        assert!(matches!(
            inspect_ptd_prefix(&FIXTURE[..need - 1], size),
            Err(PteError::Truncated(_))
        ));
        // A file cut short in the store: the prefix is fine, the data is not all there.
        assert!(matches!(
            inspect_ptd_prefix(&FIXTURE[..need], size - 1),
            Err(PteError::Truncated(_))
        ));
    }

    #[test]
    fn the_fixtures_data_file_provides_every_external_tensor_of_its_program() {
        let program = crate::pte::inspect(include_bytes!(
            "../../../tests/fixtures/pte/mlp-external-portable.pte"
        ))
        .expect("program");
        let data = inspect_ptd(FIXTURE).expect("data");
        assert!(missing_external_tensors(&program, std::slice::from_ref(&data)).is_empty());
        assert_eq!(
            missing_external_tensors(&program, &[]),
            ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
        );
    }

    #[test]
    fn truncated_and_flipped_files_are_errors_not_panics() {
        for len in 0..FIXTURE.len() {
            let _ = inspect_ptd(&FIXTURE[..len]);
        }
        let mut copy = FIXTURE.to_vec();
        for i in 0..copy.len() {
            for bit in [0x01u8, 0x80] {
                copy[i] ^= bit;
                let _ = inspect_ptd(&copy);
                copy[i] ^= bit;
            }
        }
        assert!(inspect_ptd(b"not a data file at all, just some words to read").is_err());
    }
}
