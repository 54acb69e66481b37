//! The `ferry-grouped-zstd` representation of a file: what the server sends for a whole-file
//! download when the client asks for it (`Accept-Encoding: ferry-grouped-zstd`), and what
//! `ferry publish` makes and the server checks.
//!
//! Float weights compress poorly byte by byte, because each 4-byte float mixes a predictable
//! sign-and-exponent byte with nearly random mantissa bytes. Grouping puts byte 0 of every word
//! together, then byte 1, and so on, so that zstd sees long runs of similar bytes (the same
//! trick Hugging Face's Xet uses for weights). The file is grouped block by block, so a reader
//! decodes it as a stream with one block in memory.
//!
//! Layout (integers little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `FRGZ` |
//! | 4 | format version, 1 |
//! | 5 | word width: 1 (no grouping), 2, 4 or 8 |
//! | 6..8 | zero |
//! | 8..12 | block size: a multiple of the width, [`MIN_BLOCK`]..=[`MAX_BLOCK`] |
//! | 12..20 | length of the file |
//! | 20.. | one zstd frame holding the grouped blocks |
//!
//! In each block of `n` bytes the first `n - n % width` bytes are grouped (byte `j` of word `i`
//! is at `j * words + i`) and the last `n % width` follow as they are. Every block is full but
//! the last. A reader refuses any other version, width or block size, a frame that needs a
//! window larger than [`WINDOW_LOG_MAX`] allows, and a frame that holds more or fewer bytes
//! than the header's length. The decoded bytes are still only a candidate: the client checks
//! them against the signed digest like any other download.

use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};

/// The HTTP content coding of this representation.
pub const CODING: &str = "ferry-grouped-zstd";

/// Bytes grouped at a time, and held in memory by a reader.
pub const BLOCK: u32 = 1 << 20;

/// The smallest block size a reader takes.
pub const MIN_BLOCK: u32 = 4 << 10;

/// The largest block size a reader takes (it holds two blocks at a time): [`BLOCK`].
pub const MAX_BLOCK: u32 = BLOCK;

/// The zstd level `ferry publish` compresses at (`bench/compression.py`: level 19 saves about
/// 1.5 points more on FP32 weights, at many times the time).
pub const LEVEL: i32 = 3;

/// The largest zstd window a reader accepts, as a power of two (8 MiB: what a phone spends on
/// decoding, besides two blocks). The writer keeps within it.
pub const WINDOW_LOG_MAX: u32 = 23;

const MAGIC: &[u8; 4] = b"FRGZ";
const VERSION: u8 = 1;
const HEADER: usize = 20;

/// The header of an encoded file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes per word grouped: 1 (none), 2, 4 or 8.
    pub width: u8,
    /// Bytes per block.
    pub block: u32,
    /// Length of the decoded file.
    pub len: u64,
}

impl Header {
    fn to_bytes(self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[..4].copy_from_slice(MAGIC);
        b[4] = VERSION;
        b[5] = self.width;
        b[8..12].copy_from_slice(&self.block.to_le_bytes());
        b[12..20].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    fn parse(b: &[u8; HEADER]) -> io::Result<Self> {
        if &b[..4] != MAGIC {
            return Err(invalid("it does not start with FRGZ"));
        }
        if b[4] != VERSION {
            return Err(invalid(&format!("format version {} is unknown", b[4])));
        }
        if b[6..8] != [0, 0] {
            return Err(invalid("bytes 6 and 7 of the header are not zero"));
        }
        let width = b[5];
        let block = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        let len = u64::from_le_bytes([b[12], b[13], b[14], b[15], b[16], b[17], b[18], b[19]]);
        if !matches!(width, 1 | 2 | 4 | 8) {
            return Err(invalid(&format!("word width {width} is not 1, 2, 4 or 8")));
        }
        if !(MIN_BLOCK..=MAX_BLOCK).contains(&block) || !block.is_multiple_of(u32::from(width)) {
            return Err(invalid(&format!("block size {block} is out of bounds")));
        }
        Ok(Self { width, block, len })
    }
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{CODING}: {why}"))
}

/// Groups `block` (see the module's documentation) into `out`, which it clears first.
pub fn group(block: &[u8], width: usize, out: &mut Vec<u8>) {
    out.clear();
    out.resize(block.len(), 0);
    let words = block.len() / width;
    let grouped = words * width;
    for j in 0..width {
        let lane = &mut out[j * words..(j + 1) * words];
        for (i, b) in lane.iter_mut().enumerate() {
            *b = block[i * width + j];
        }
    }
    out[grouped..].copy_from_slice(&block[grouped..]);
}

/// Undoes [`group`]: `grouped` back into `out`, which it clears first.
pub fn ungroup(grouped: &[u8], width: usize, out: &mut Vec<u8>) {
    out.clear();
    out.resize(grouped.len(), 0);
    let words = grouped.len() / width;
    let cut = words * width;
    if width == 4 {
        // The common case (float32 weights) in a form the compiler turns into wide moves.
        let (a, rest) = grouped.split_at(words);
        let (b, rest) = rest.split_at(words);
        let (c, d) = rest.split_at(words);
        for (i, word) in out[..cut].chunks_exact_mut(4).enumerate() {
            word.copy_from_slice(&[a[i], b[i], c[i], d[i]]);
        }
    } else {
        for j in 0..width {
            let lane = &grouped[j * words..(j + 1) * words];
            for (i, b) in lane.iter().enumerate() {
                out[i * width + j] = *b;
            }
        }
    }
    out[cut..].copy_from_slice(&grouped[cut..]);
}

/// Encodes the `len` bytes of `input` with words of `width` bytes into `out`, and returns
/// `out`.
pub fn encode<R: Read, W: Write>(mut input: R, len: u64, width: u8, out: W) -> io::Result<W> {
    let header = Header {
        width,
        block: BLOCK,
        len,
    };
    let mut out = out;
    out.write_all(&header.to_bytes())?;
    let mut z = zstd::stream::write::Encoder::new(out, LEVEL)?;
    z.window_log(WINDOW_LOG_MAX)?;
    z.set_pledged_src_size(Some(len))?;
    let mut block = vec![0u8; BLOCK as usize];
    let mut grouped = Vec::with_capacity(BLOCK as usize);
    let mut left = len;
    while left > 0 {
        let n = usize::try_from(left.min(u64::from(BLOCK))).map_err(io::Error::other)?;
        input.read_exact(&mut block[..n])?;
        group(&block[..n], usize::from(width), &mut grouped);
        z.write_all(&grouped)?;
        left -= n as u64;
    }
    z.finish()
}

/// What [`choose`] found on a file's sample blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// The word width that compressed them best.
    pub width: u8,
    /// Bytes sampled.
    pub sampled: u64,
    /// What they compressed to with that width (each block on its own).
    pub compressed: u64,
}

impl Choice {
    /// The share the samples saved, in percent (negative when they grew).
    pub fn saving_percent(&self) -> f64 {
        100.0 * (1.0 - self.compressed as f64 / self.sampled.max(1) as f64)
    }
}

/// The word width that compresses `file` best, judged on up to eight blocks spread through it
/// (4 for float32 weights, 1 for programs of integers and text), and what those blocks
/// compressed to: an estimate of the saving before the whole file is encoded.
pub fn choose<F: Read + Seek>(file: &mut F, len: u64) -> io::Result<Choice> {
    let blocks = len.div_ceil(u64::from(BLOCK)).max(1);
    let picks = blocks.min(8);
    let mut sizes = [0u64; 2];
    let mut sampled = 0u64;
    let mut block = vec![0u8; BLOCK as usize];
    let mut grouped = Vec::with_capacity(BLOCK as usize);
    for k in 0..picks {
        let at = (k * blocks / picks) * u64::from(BLOCK);
        file.seek(SeekFrom::Start(at))?;
        let n = usize::try_from((len - at).min(u64::from(BLOCK))).map_err(io::Error::other)?;
        file.read_exact(&mut block[..n])?;
        sampled += n as u64;
        for (slot, width) in [1usize, 4].into_iter().enumerate() {
            group(&block[..n], width, &mut grouped);
            sizes[slot] += zstd::bulk::compress(&grouped, LEVEL)?.len() as u64;
        }
    }
    file.seek(SeekFrom::Start(0))?;
    let (width, compressed) = if sizes[1] < sizes[0] {
        (4, sizes[1])
    } else {
        (1, sizes[0])
    };
    Ok(Choice {
        width,
        sampled,
        compressed,
    })
}

/// A reader of an encoded stream that yields the decoded file.
pub struct Decoder<R: BufRead> {
    header: Header,
    zstd: zstd::stream::read::Decoder<'static, Watch<R>>,
    grouped: Vec<u8>,
    block: Vec<u8>,
    at: usize,
    left: u64,
    format_failed: bool,
}

/// The stream under the decoder, watched for how it ended.
struct Watch<R> {
    inner: R,
    failed: bool,
}

impl<R: BufRead> Read for Watch<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.fill_buf()?.len().min(buf.len());
        buf[..n].copy_from_slice(&self.fill_buf()?[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Watch<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match self.inner.fill_buf() {
            Ok(b) => {
                if b.is_empty() {
                    self.failed = true;
                }
                Ok(b)
            }
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    fn consume(&mut self, n: usize) {
        self.inner.consume(n);
    }
}

impl<R: BufRead> Decoder<R> {
    /// Reads the header from `reader` and gets ready to decode.
    pub fn new(mut reader: R) -> io::Result<Self> {
        let mut head = [0u8; HEADER];
        reader.read_exact(&mut head)?;
        let header = Header::parse(&head)?;
        let mut zstd = zstd::stream::read::Decoder::with_buffer(Watch {
            inner: reader,
            failed: false,
        })?
        .single_frame();
        zstd.window_log_max(WINDOW_LOG_MAX)?;
        Ok(Self {
            header,
            zstd,
            grouped: Vec::new(),
            block: Vec::new(),
            at: 0,
            left: header.len,
            format_failed: false,
        })
    }

    /// The stream's header.
    pub fn header(&self) -> Header {
        self.header
    }

    /// Whether decoding failed on the bytes themselves (not on the stream ending early or a
    /// read error of the stream under it): another try of the same bytes cannot succeed.
    pub fn format_failed(&self) -> bool {
        self.format_failed
    }

    fn refill(&mut self) -> io::Result<()> {
        let n = usize::try_from(self.left.min(u64::from(self.header.block)))
            .map_err(io::Error::other)?;
        self.grouped.resize(n, 0);
        let mut got = 0;
        while got < n {
            match self.zstd.read(&mut self.grouped[got..n]) {
                Ok(0) => {
                    return Err(self.failure(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{CODING}: the stream ends before the file's end"),
                    )));
                }
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failure(e)),
            }
        }
        self.left -= n as u64;
        if self.left == 0 {
            // Nothing may follow the file's last byte in the frame.
            let mut probe = [0u8; 1];
            match self.zstd.read(&mut probe) {
                Ok(0) => {}
                Ok(_) => {
                    self.format_failed = true;
                    return Err(invalid("the stream holds more than the header's length"));
                }
                Err(e) => return Err(self.failure(e)),
            }
        }
        ungroup(
            &self.grouped,
            usize::from(self.header.width),
            &mut self.block,
        );
        self.at = 0;
        Ok(())
    }

    /// After the whole file was read: an error unless the stream under the frame ends there too
    /// (what an upload must be; a download's body may be cut by its length instead).
    pub fn finish(mut self) -> io::Result<()> {
        if self.left > 0 || self.at < self.block.len() {
            return Err(invalid("the file was not read to its end"));
        }
        self.zstd.finish_frame()?;
        if !self.zstd.get_mut().inner.fill_buf()?.is_empty() {
            return Err(invalid("bytes follow the encoded file"));
        }
        Ok(())
    }

    /// Marks a decoding error as the format's fault unless the stream under it failed.
    fn failure(&mut self, e: io::Error) -> io::Error {
        if !self.zstd.get_ref().failed {
            self.format_failed = true;
        }
        e
    }
}

impl<R: BufRead> Read for Decoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.block.len() {
            if self.left == 0 {
                return Ok(0);
            }
            self.refill()?;
        }
        let n = buf.len().min(self.block.len() - self.at);
        buf[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| ((i as f32 * 0.37).sin() * 0.05).to_le_bytes())
            .collect()
    }

    fn encoded(data: &[u8], width: u8) -> Vec<u8> {
        encode(data, data.len() as u64, width, Vec::new()).expect("test")
    }

    fn decoded(stream: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        Decoder::new(stream)?.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn grouping_round_trips_every_width_and_tail() {
        let data: Vec<u8> = (0..1031u32).map(|i| (i * 7 % 251) as u8).collect();
        for width in [1usize, 2, 4, 8] {
            for cut in [0, 1, 3, 4, 5, 1030, 1031] {
                let (mut g, mut back) = (Vec::new(), Vec::new());
                group(&data[..cut], width, &mut g);
                ungroup(&g, width, &mut back);
                assert_eq!(back, &data[..cut], "width {width}, {cut} bytes");
            }
        }
        let mut g = Vec::new();
        group(&[1, 2, 3, 4, 5, 6, 7, 8, 9], 4, &mut g);
        assert_eq!(g, [1, 5, 2, 6, 3, 7, 4, 8, 9]);
    }

    #[test]
    fn round_trips_across_blocks() {
        let data = floats(700_000); // 2.7 blocks
        for width in [1, 4] {
            assert_eq!(decoded(&encoded(&data, width)).expect("test"), data);
        }
        assert_eq!(decoded(&encoded(&[], 4)).expect("test"), Vec::<u8>::new());
    }

    #[test]
    fn grouping_shrinks_float_weights() {
        let data = floats(1 << 20);
        let (plain, grouped) = (encoded(&data, 1).len(), encoded(&data, 4).len());
        assert!(grouped < plain, "grouped {grouped} >= plain {plain}");
        let mut file = io::Cursor::new(data.clone());
        let chosen = choose(&mut file, data.len() as u64).expect("test");
        assert_eq!(chosen.width, 4);
        assert!(chosen.saving_percent() > 5.0, "{chosen:?}");
        let text = b"the runtime loads a program ".repeat(50_000);
        let mut file = io::Cursor::new(text.clone());
        assert_eq!(choose(&mut file, text.len() as u64).expect("test").width, 1);
        // Bytes that do not compress say so before anything is encoded.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let random: Vec<u8> = (0..3 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let mut file = io::Cursor::new(random.clone());
        let chosen = choose(&mut file, random.len() as u64).expect("test");
        assert!(chosen.saving_percent() < 1.0, "{chosen:?}");
    }

    #[test]
    fn refuses_damaged_streams() {
        let data = floats(300_000);
        let good = encoded(&data, 4);
        let refused = |bytes: &[u8], format: bool| {
            let mut out = Vec::new();
            match Decoder::new(bytes) {
                Err(_) => assert!(!format, "a header error where the frame was damaged"),
                Ok(mut d) => {
                    assert!(d.read_to_end(&mut out).is_err());
                    assert_eq!(d.format_failed(), format);
                }
            }
        };
        // Truncated: the stream under it ended, so another try may succeed.
        refused(&good[..good.len() / 2], false);
        refused(&good[..HEADER + 3], false);
        assert!(Decoder::new(&good[..10]).is_err());
        // A flipped byte in the frame, a longer or shorter length, trailing bytes.
        let mut flipped = good.clone();
        flipped[HEADER + 100] ^= 0x55;
        let mut out = Vec::new();
        let flipped_ok = Decoder::new(&flipped[..])
            .and_then(|mut d| d.read_to_end(&mut out))
            .is_ok();
        assert!(
            !flipped_ok || out != data,
            "a flipped byte decoded to the file"
        );
        for len in [data.len() as u64 - 1, data.len() as u64 + 1] {
            let mut b = good.clone();
            b[12..20].copy_from_slice(&len.to_le_bytes());
            refused(&b, true);
        }
        // Bad headers.
        for (at, value) in [(0, b'X'), (4, 2), (5, 3), (6, 1), (10, 0x20), (8, 0x02)] {
            let mut b = good.clone();
            b[at] = value;
            let e = Decoder::new(&b[..]).err().expect("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "byte {at}");
        }
    }

    #[test]
    fn finish_refuses_bytes_after_the_frame() {
        let data = floats(300_000);
        let good = encoded(&data, 4);
        let read_all = |bytes: &[u8]| -> io::Result<()> {
            let mut d = Decoder::new(bytes)?;
            let mut out = Vec::new();
            d.read_to_end(&mut out)?;
            assert_eq!(out, data);
            d.finish()
        };
        read_all(&good).expect("the encoding alone");
        let mut longer = good.clone();
        longer.extend_from_slice(b"junk");
        let e = read_all(&longer).expect_err("junk after the frame");
        assert!(e.to_string().contains("follow"), "{e}");
        // A second (skippable) frame after the first is more bytes too.
        let mut skippable = good.clone();
        skippable.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]);
        assert!(read_all(&skippable).is_err());
    }

    #[test]
    fn refuses_a_frame_wider_than_its_window() {
        // 12 MiB written with a 128 MiB window and no pledged size: the frame asks for more
        // memory than a reader gives.
        let data: Vec<u8> = (0..12u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut z = zstd::stream::write::Encoder::new(Vec::new(), 1).expect("test");
        z.window_log(27).expect("test");
        for piece in data.chunks(1 << 20) {
            z.write_all(piece).expect("test");
            z.flush().expect("test");
        }
        let frame = z.finish().expect("test");
        let header = Header {
            width: 1,
            block: BLOCK,
            len: data.len() as u64,
        };
        let mut stream = header.to_bytes().to_vec();
        stream.extend_from_slice(&frame);
        let mut d = Decoder::new(&stream[..]).expect("test");
        let mut out = Vec::new();
        assert!(d.read_to_end(&mut out).is_err());
        assert!(d.format_failed());
    }
}
