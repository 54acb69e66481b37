//! A small, bounds-checked FlatBuffers reader.
//!
//! Only what the inspector needs: tables with vtables, scalar fields, sub-tables, vectors of
//! scalars and of tables, strings, and union type tags. Every access checks bounds and returns
//! an error instead of panicking; every visit is charged to a [`Budget`] so that a hostile file
//! whose offsets point many times at the same large vector cannot make the reader loop for long.

use super::error::PteError;

/// Counts work units; reading stops with an error when it runs out.
#[derive(Debug)]
pub(crate) struct Budget {
    left: u64,
    limit: u64,
    string_bytes_left: u64,
    string_bytes_limit: u64,
}

impl Budget {
    pub(crate) fn new(limit: u64, string_bytes_limit: u64) -> Self {
        Self {
            left: limit,
            limit,
            string_bytes_left: string_bytes_limit,
            string_bytes_limit,
        }
    }

    /// Charges the bytes of a string that will be copied out.
    fn charge_string(&mut self, len: usize) -> Result<(), PteError> {
        let len = len as u64;
        if len > self.string_bytes_left {
            self.string_bytes_left = 0;
            return Err(PteError::LimitExceeded {
                what: "total string bytes",
                limit: self.string_bytes_limit,
            });
        }
        self.string_bytes_left -= len;
        self.charge(len / 64)
    }

    pub(crate) fn charge(&mut self, units: u64) -> Result<(), PteError> {
        if units > self.left {
            self.left = 0;
            return Err(PteError::LimitExceeded {
                what: "work units (file structure too large or self-referential)",
                limit: self.limit,
            });
        }
        self.left -= units;
        Ok(())
    }
}

fn malformed(at: usize, why: &'static str) -> PteError {
    PteError::Malformed { offset: at, why }
}

/// Raw little-endian reads with bounds checks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buf<'a> {
    pub(crate) data: &'a [u8],
}

impl<'a> Buf<'a> {
    pub(crate) fn bytes(&self, at: usize, len: usize) -> Result<&'a [u8], PteError> {
        let end = at
            .checked_add(len)
            .ok_or_else(|| malformed(at, "offset overflow"))?;
        self.data
            .get(at..end)
            .ok_or_else(|| malformed(at, "reference past the end of the program data"))
    }

    fn array<const N: usize>(&self, at: usize) -> Result<[u8; N], PteError> {
        let b = self.bytes(at, N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub(crate) fn u8(&self, at: usize) -> Result<u8, PteError> {
        Ok(self.array::<1>(at)?[0])
    }
    pub(crate) fn u16(&self, at: usize) -> Result<u16, PteError> {
        Ok(u16::from_le_bytes(self.array(at)?))
    }
    pub(crate) fn u32(&self, at: usize) -> Result<u32, PteError> {
        Ok(u32::from_le_bytes(self.array(at)?))
    }
    pub(crate) fn i32(&self, at: usize) -> Result<i32, PteError> {
        Ok(i32::from_le_bytes(self.array(at)?))
    }
    pub(crate) fn u64(&self, at: usize) -> Result<u64, PteError> {
        Ok(u64::from_le_bytes(self.array(at)?))
    }

    /// Follows an unsigned 32-bit offset stored at `at` (relative to `at`).
    fn follow(&self, at: usize) -> Result<usize, PteError> {
        let off = self.u32(at)? as usize;
        if off == 0 {
            return Err(malformed(at, "zero offset"));
        }
        at.checked_add(off)
            .filter(|&p| p < self.data.len())
            .ok_or_else(|| malformed(at, "offset points past the end of the program data"))
    }

    /// The root table of the buffer.
    pub(crate) fn root(&self, budget: &mut Budget) -> Result<Table<'a>, PteError> {
        let pos = self.follow(0)?;
        Table::at(*self, pos, budget)
    }
}

/// A table: a position in the buffer and its vtable.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Table<'a> {
    buf: Buf<'a>,
    pos: usize,
    vtable: usize,
    vtable_len: usize,
    table_len: usize,
}

impl<'a> Table<'a> {
    fn at(buf: Buf<'a>, pos: usize, budget: &mut Budget) -> Result<Self, PteError> {
        budget.charge(1)?;
        let soff = buf.i32(pos)? as i64;
        let vtable = (pos as i64)
            .checked_sub(soff)
            .filter(|&v| v >= 0)
            .ok_or_else(|| malformed(pos, "vtable offset points before the start"))?
            as usize;
        let vtable_len = buf.u16(vtable)? as usize;
        let table_len = buf.u16(vtable + 2)? as usize;
        if vtable_len < 4 || !vtable_len.is_multiple_of(2) {
            return Err(malformed(vtable, "vtable size is invalid"));
        }
        buf.bytes(vtable, vtable_len)?;
        if table_len < 4 {
            return Err(malformed(
                pos,
                "table size is smaller than its vtable offset",
            ));
        }
        buf.bytes(pos, table_len)?;
        Ok(Self {
            buf,
            pos,
            vtable,
            vtable_len,
            table_len,
        })
    }

    /// The absolute position of field `id` holding `size` bytes, if present.
    fn field(&self, id: usize, size: usize) -> Result<Option<usize>, PteError> {
        let slot = 4 + 2 * id;
        if slot + 2 > self.vtable_len {
            return Ok(None);
        }
        let off = self.buf.u16(self.vtable + slot)? as usize;
        if off == 0 {
            return Ok(None);
        }
        if off < 4 || off + size > self.table_len {
            return Err(malformed(self.pos, "field lies outside its table"));
        }
        Ok(Some(self.pos + off))
    }

    pub(crate) fn u8(&self, id: usize, default: u8) -> Result<u8, PteError> {
        match self.field(id, 1)? {
            Some(p) => self.buf.u8(p),
            None => Ok(default),
        }
    }

    pub(crate) fn u32(&self, id: usize, default: u32) -> Result<u32, PteError> {
        match self.field(id, 4)? {
            Some(p) => self.buf.u32(p),
            None => Ok(default),
        }
    }

    pub(crate) fn i32(&self, id: usize, default: i32) -> Result<i32, PteError> {
        match self.field(id, 4)? {
            Some(p) => self.buf.i32(p),
            None => Ok(default),
        }
    }

    pub(crate) fn u64(&self, id: usize, default: u64) -> Result<u64, PteError> {
        match self.field(id, 8)? {
            Some(p) => self.buf.u64(p),
            None => Ok(default),
        }
    }

    /// A sub-table field.
    pub(crate) fn table(
        &self,
        id: usize,
        budget: &mut Budget,
    ) -> Result<Option<Table<'a>>, PteError> {
        match self.field(id, 4)? {
            Some(p) => Ok(Some(Table::at(self.buf, self.buf.follow(p)?, budget)?)),
            None => Ok(None),
        }
    }

    /// A vector field whose elements are `elem_size` bytes each (4 for offsets to tables).
    pub(crate) fn vector(
        &self,
        id: usize,
        elem_size: usize,
        budget: &mut Budget,
    ) -> Result<Option<Vector<'a>>, PteError> {
        let Some(p) = self.field(id, 4)? else {
            return Ok(None);
        };
        budget.charge(1)?;
        let at = self.buf.follow(p)?;
        let len = self.buf.u32(at)? as usize;
        let start = at + 4;
        let bytes = len
            .checked_mul(elem_size)
            .ok_or_else(|| malformed(at, "vector length overflows"))?;
        self.buf.bytes(start, bytes)?;
        Ok(Some(Vector {
            buf: self.buf,
            start,
            len,
            elem_size,
        }))
    }

    /// A string field, checked to be UTF-8 and at most `max` bytes.
    pub(crate) fn string(
        &self,
        id: usize,
        max: usize,
        budget: &mut Budget,
    ) -> Result<Option<&'a str>, PteError> {
        let Some(v) = self.vector(id, 1, budget)? else {
            return Ok(None);
        };
        if v.len > max {
            return Err(PteError::LimitExceeded {
                what: "string length",
                limit: max as u64,
            });
        }
        budget.charge_string(v.len)?;
        let bytes = self.buf.bytes(v.start, v.len)?;
        std::str::from_utf8(bytes)
            .map(Some)
            .map_err(|_| malformed(v.start, "string is not UTF-8"))
    }
}

/// A vector inside the buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Vector<'a> {
    buf: Buf<'a>,
    start: usize,
    pub(crate) len: usize,
    elem_size: usize,
}

impl<'a> Vector<'a> {
    fn elem(&self, i: usize) -> Result<usize, PteError> {
        if i >= self.len {
            return Err(malformed(self.start, "vector index out of range"));
        }
        Ok(self.start + i * self.elem_size)
    }

    /// Element `i` of a vector of tables.
    pub(crate) fn table(&self, i: usize, budget: &mut Budget) -> Result<Table<'a>, PteError> {
        let p = self.elem(i)?;
        Table::at(self.buf, self.buf.follow(p)?, budget)
    }

    /// The raw bytes of a vector of u8.
    pub(crate) fn raw(&self) -> Result<&'a [u8], PteError> {
        self.buf.bytes(self.start, self.len * self.elem_size)
    }
}
