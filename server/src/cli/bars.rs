//! Progress bars of uploads and of the work before them (`ferry publish`).

use std::io::Read;

/// A reader that advances a progress bar.
pub(crate) struct Progress<R> {
    pub(crate) inner: R,
    pub(crate) bar: indicatif::ProgressBar,
}

impl<R: Read> Read for Progress<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

/// The progress bar of one upload (hidden with `quiet`).
pub(crate) fn upload_bar(quiet: bool, size: u64, id: &str) -> indicatif::ProgressBar {
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(size)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(id.to_string());
    bar
}
