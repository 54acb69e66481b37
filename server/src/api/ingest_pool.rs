//! The threads that parse and aggregate telemetry batches: few (half the cores), and at a lower
//! scheduling priority than the event loops that answer resolve, so that on a busy server the
//! kernel gives resolve the CPU first and telemetry what is left, instead of an equal share.
//!
//! Measured on a 2-core machine (`bench/run --only telemetry`): resolve while telemetry was
//! ingested at full rate was 0.78-0.86x resolve alone with the batches on tokio's blocking pool
//! (equal priority); see `docs/performance.md` for the figure with this pool.

use std::sync::{Mutex, mpsc};

/// A job: runs once on one of the pool's threads.
type Job = Box<dyn FnOnce() + Send + 'static>;

/// The nice value of the pool's threads (0 is normal; 19 the least favoured). At 5 a thread
/// weighs about a third of a normal one when both want the CPU.
pub const INGEST_NICE: i32 = 5;

/// A fixed set of lower-priority threads that run jobs in the order they come. The threads
/// end when the pool is dropped.
pub struct IngestPool {
    /// `None` when no thread could be started: jobs run on tokio's blocking pool instead.
    tx: Option<Mutex<mpsc::Sender<Job>>>,
}

impl std::fmt::Debug for IngestPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IngestPool")
    }
}

impl IngestPool {
    /// Starts `threads` threads (at least one) named `ferry-ingest-N`. A thread the system
    /// refuses is left out (with a warning); with none, jobs run on tokio's blocking pool.
    pub fn new(threads: usize) -> IngestPool {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = std::sync::Arc::new(Mutex::new(rx));
        let mut started = 0;
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("ferry-ingest-{i}"))
                .spawn(move || {
                    lower_priority();
                    loop {
                        let job = ferry_shared::sync::lock(&rx).recv();
                        match job {
                            Ok(job) => job(),
                            // The pool (the server) is gone.
                            Err(_) => return,
                        }
                    }
                });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => tracing::warn!("cannot start a telemetry thread: {e}"),
            }
        }
        IngestPool {
            tx: (started > 0).then(|| Mutex::new(tx)),
        }
    }

    /// Runs `f` on the pool; its result, or `None` when it panicked or the pool stopped.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            if let Ok(out) = out {
                let _ = tx.send(out);
            }
        });
        match &self.tx {
            Some(pool) => ferry_shared::sync::lock(pool).send(job).ok()?,
            None => {
                tokio::task::spawn_blocking(job);
            }
        }
        rx.await.ok()
    }
}

/// Gives the calling thread the nice value [`INGEST_NICE`] (Linux sets it per thread). Best
/// effort: elsewhere, or when refused, the thread keeps the normal priority.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    // SAFETY: `setpriority` on this thread's own id changes nothing but its scheduling.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid, INGEST_NICE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_at_the_lower_priority_and_a_panic_is_an_answer_not_a_lost_thread() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        let pool = IngestPool::new(1);
        rt.block_on(async {
            #[cfg(target_os = "linux")]
            {
                #[allow(unsafe_code)]
                // SAFETY: reads this thread's own nice value.
                let nice = pool
                    .run(|| unsafe {
                        libc::getpriority(
                            libc::PRIO_PROCESS,
                            libc::syscall(libc::SYS_gettid) as libc::id_t,
                        )
                    })
                    .await;
                assert_eq!(nice, Some(INGEST_NICE));
            }
            assert_eq!(pool.run(|| -> u32 { panic!("a bad batch") }).await, None);
            // The one thread is still there.
            assert_eq!(pool.run(|| 7).await, Some(7));
        });
    }
}
