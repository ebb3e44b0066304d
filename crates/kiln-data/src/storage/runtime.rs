//! The blocking bridge to `object_store`'s async API.
//!
//! kiln-data's sources are synchronous iterators, while `object_store` is async (tokio). The
//! bridge is one process-wide **current-thread tokio runtime driven by a dedicated thread**
//! (`kiln-object-store`), started on first use and never stopped:
//!
//! * Callers hand futures to it with [`spawn`] and wait on a channel, so a blocking read works
//!   from any thread — including a thread of some other tokio runtime, where
//!   `Runtime::block_on` would panic.
//! * Read-ahead needs this: a chunk requested in the background keeps downloading while the
//!   consumer is busy parsing the previous one, because the runtime's own thread drives it.
//!   A runtime per reader driven by `block_on` would only make progress inside `read`.
//! * One thread serves every open object (requests are async, so many are in flight at once);
//!   the CPU work on it is HTTP framing and TLS, small next to parsing the records.

use std::future::Future;
use std::io;
use std::sync::OnceLock;
use std::sync::mpsc;

use tokio::runtime::{Builder, Handle};
use tokio::task::JoinHandle;

/// The runtime's handle, or why it could not be started.
fn handle() -> io::Result<&'static Handle> {
    static HANDLE: OnceLock<Result<Handle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let runtime = Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the object-store I/O runtime: {e}"))?;
            let handle = runtime.handle().clone();
            std::thread::Builder::new()
                .name("kiln-object-store".into())
                .spawn(move || runtime.block_on(std::future::pending::<()>()))
                .map_err(|e| format!("cannot start the object-store I/O thread: {e}"))?;
            Ok(handle)
        })
        .as_ref()
        .map_err(|message| io::Error::other(message.clone()))
}

/// A result on its way back from the runtime thread.
pub(crate) struct Pending<T> {
    receiver: mpsc::Receiver<T>,
    task: JoinHandle<()>,
}

impl<T> Pending<T> {
    /// Blocks until the future has finished and returns its output.
    ///
    /// # Errors
    /// An `io::Error` if the task died without an answer (it panicked).
    pub(crate) fn wait(self) -> io::Result<T> {
        self.receiver
            .recv()
            .map_err(|_| io::Error::other("an object-store request stopped without an answer"))
    }

    /// Cancels the request (a no-op if it has finished).
    pub(crate) fn abort(&self) {
        self.task.abort();
    }
}

/// Starts `future` on the I/O runtime; [`Pending::wait`] for its output.
///
/// # Errors
/// When the runtime cannot be started (no threads left).
pub(crate) fn spawn<F>(future: F) -> io::Result<Pending<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (sender, receiver) = mpsc::sync_channel(1);
    let task = handle()?.spawn(async move {
        let _ = sender.send(future.await);
    });
    Ok(Pending { receiver, task })
}

/// Runs `future` on the I/O runtime and blocks until it finishes.
///
/// # Errors
/// As [`spawn`] and [`Pending::wait`].
pub(crate) fn block_on<F>(future: F) -> io::Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    spawn(future)?.wait()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn futures_run_on_the_io_thread_while_the_caller_works() {
        let name = block_on(async { std::thread::current().name().map(String::from) }).unwrap();
        assert_eq!(name.as_deref(), Some("kiln-object-store"));
        // A spawned future makes progress without being waited on.
        let (tx, rx) = mpsc::channel();
        let pending = spawn(async move {
            tx.send(7).unwrap();
            8
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 7);
        assert_eq!(pending.wait().unwrap(), 8);
        // Waiting works from inside another tokio runtime too.
        let outer = Builder::new_current_thread().build().unwrap();
        assert_eq!(outer.block_on(async { block_on(async { 3 }).unwrap() }), 3);
    }

    #[test]
    fn an_aborted_request_reports_an_error() {
        let pending = spawn(async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            1
        })
        .unwrap();
        pending.abort();
        let err = pending.wait().unwrap_err();
        assert!(err.to_string().contains("without an answer"), "{err}");
    }
}
