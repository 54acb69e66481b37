//! [`Guarded`]: every accepted connection's stream, wrapped so that what a client makes the
//! server hold stays bounded whatever it does.
//!
//! The HTTP/1 dispatcher reads as long as the socket has bytes, decodes every pipelined request
//! it has read and queues it, and keeps answering into its buffer; a client that writes
//! thousands of requests back to back and never reads its answers made it hold megabytes per
//! connection, for as long as the connection stayed open. The guard gives the dispatcher:
//!
//! - **no reads while a write is blocked**: once the socket does not take an answer's bytes
//!   (the client stopped reading), nothing more is read until it does, so no further requests
//!   are decoded; the kernel's buffers then push back on the client;
//! - **one full read per turn**: a read that fills the dispatcher's buffer ends its turn (the
//!   task is woken to go on), so pipelined requests are decoded a buffer at a time, each batch
//!   answered before the next is read;
//! - **a write timeout**: a connection whose answers have not moved for `write_timeout` is
//!   closed (its client stopped reading); a slow reader that keeps taking bytes is never cut.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::rt::time::Sleep;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection's stream under the guard's rules (see the module docs).
pub struct Guarded<T> {
    io: T,
    write_timeout: Duration,
    /// The last write did not go through (the socket's buffer is full).
    write_blocked: bool,
    /// The last read filled the buffer it was given: the next one ends the turn first.
    read_full: bool,
    /// When a blocked write gives up.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> Guarded<T> {
    /// Wraps `io`; a write that makes no progress for `write_timeout` fails with `TimedOut`.
    pub fn new(io: T, write_timeout: Duration) -> Self {
        Self {
            io,
            write_timeout,
            write_blocked: false,
            read_full: false,
            deadline: None,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// Notes a write that went nowhere: starts (or checks) the write timeout. `Err` once it has
    /// run out.
    fn blocked(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        self.write_blocked = true;
        let timeout = self.write_timeout;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(actix_web::rt::time::sleep(timeout)));
        if deadline.as_mut().poll(cx).is_ready() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client has not read its answers for {} s",
                    timeout.as_secs()
                ),
            ));
        }
        Ok(())
    }

    /// Notes a write that went through: reads may go on (and the task is woken for them, as
    /// no read registered for wake-ups while writes were blocked).
    fn unblocked(&mut self, cx: &mut Context<'_>) {
        self.deadline = None;
        if self.write_blocked {
            self.write_blocked = false;
            cx.waker().wake_by_ref();
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.write_blocked {
            // The blocked write's wake-up (writable, or its timeout) polls again.
            return Poll::Pending;
        }
        if this.read_full {
            this.read_full = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let room = buf.remaining();
        let before = buf.filled().len();
        let got = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(got, Poll::Ready(Ok(()))) {
            let n = buf.filled().len() - before;
            // A short read drained the socket: the next read waits for new bytes as usual.
            this.read_full = n > 0 && n == room;
        }
        got
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write(cx, data) {
            Poll::Pending => {
                this.blocked(cx)?;
                Poll::Pending
            }
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    this.unblocked(cx);
                }
                Poll::Ready(Ok(n))
            }
            other => other,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Pending => {
                this.blocked(cx)?;
                Poll::Pending
            }
            // A TLS stream takes an answer's bytes into its own buffer and sends them on flush:
            // a flush that went through unblocks reads as a write does.
            Poll::Ready(Ok(())) => {
                this.unblocked(cx);
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A pair of connected in-memory streams with `cap` bytes of buffer each way.
    fn pair(cap: usize) -> (tokio::io::DuplexStream, tokio::io::DuplexStream) {
        tokio::io::duplex(cap)
    }

    #[tokio::test]
    async fn a_write_nobody_reads_times_out() {
        let (server, _client) = pair(64);
        let mut g = Guarded::new(server, Duration::from_millis(200));
        let started = std::time::Instant::now();
        let err = g.write_all(&[0u8; 4096]).await.expect_err("nobody reads");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn a_slow_reader_that_keeps_reading_is_never_cut() {
        let (server, mut client) = pair(64);
        let mut g = Guarded::new(server, Duration::from_millis(300));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut chunk = [0u8; 64];
            while got.len() < 2048 {
                actix_web::rt::time::sleep(Duration::from_millis(20)).await;
                let n = client.read(&mut chunk).await.expect("read");
                got.extend_from_slice(&chunk[..n]);
            }
            got.len()
        });
        // 32 writes of 64 bytes, 20 ms apart on the reader's side: 640 ms in all, longer than
        // the timeout, but never 300 ms without progress.
        g.write_all(&[7u8; 2048]).await.expect("slow but moving");
        assert_eq!(reader.await.expect("reader"), 2048);
    }

    #[tokio::test]
    async fn no_reads_while_a_write_is_blocked() {
        let (server, mut client) = pair(64);
        let mut g = Guarded::new(server, Duration::from_secs(30));
        client.write_all(b"GET / HTTP/1.1\r\n").await.expect("send");
        // Fill the way back: the next write blocks.
        g.write_all(&[1u8; 64]).await.expect("fits");
        let blocked = futures_util::FutureExt::now_or_never(g.write_all(&[2u8; 8]));
        assert!(blocked.is_none(), "the client does not read");
        let mut buf = [0u8; 64];
        let read = futures_util::FutureExt::now_or_never(g.read(&mut buf));
        assert!(read.is_none(), "requests wait while answers cannot go out");
        // The client reads: the write goes through and reads go on.
        let mut sink = [0u8; 64];
        client.read_exact(&mut sink).await.expect("drain");
        g.write_all(&[2u8; 8]).await.expect("room again");
        let n = g.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n");
    }

    #[tokio::test]
    async fn a_full_read_ends_the_turn_and_the_next_goes_on() {
        let (server, mut client) = pair(4096);
        let mut g = Guarded::new(server, Duration::from_secs(30));
        client.write_all(&[3u8; 100]).await.expect("send");
        let mut small = [0u8; 10];
        assert_eq!(g.read(&mut small).await.expect("read"), 10);
        // The buffer was filled: the next poll ends the turn (and wakes the task) ...
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut rb = ReadBuf::new(&mut small);
        assert!(Pin::new(&mut g).poll_read(&mut cx, &mut rb).is_pending());
        // ... and the one after reads again.
        assert_eq!(g.read(&mut small).await.expect("read"), 10);
    }
}
