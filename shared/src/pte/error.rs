//! The inspector's limits against hostile input ([`PteLimits`]), its errors ([`PteError`]),
//! and the format markers it knows.

use crate::errors::ErrorCode;

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
    #[error("truncated file: {0}")]
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
