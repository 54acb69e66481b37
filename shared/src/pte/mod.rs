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

mod error;
mod fb;
mod ptd;
mod reader;
mod report;

pub use error::{
    EXTENDED_HEADER_MAGIC, FILE_IDENTIFIER, KNOWN_SCHEMA_VERSION, PteError, PteLimits,
};

pub use ptd::{
    DataFileProblems, PTD_IDENTIFIER, PtdReport, PtdTensor, check_data_files, inspect_ptd,
    inspect_ptd_prefix, is_ptd, missing_external_tensors, ptd_required_prefix, scalar_type_name,
};
pub use report::*;

use fb::{Budget, Buf};
use reader::Reader;

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
    // Empty segments need no data in the file: a program exported with its constants in a
    // separate data file lists one empty segment and has no extended header.
    if segments.iter().any(|s| s.size > 0) {
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

#[cfg(test)]
mod tests;
