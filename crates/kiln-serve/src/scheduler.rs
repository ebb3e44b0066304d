//! Inference on worker threads, with request batching (TF Serving's shared batch scheduler,
//! simplified).
//!
//! Requests are queued as tasks; dedicated OS threads (never the async runtime's) run them.
//! With batching on, a task joins the newest open batch of the same model version when the
//! batch has room for its examples (up to `max_batch_size`), else opens a new batch; a batch
//! runs when it is full, when `batch_timeout_micros` have passed since it opened, or at
//! shutdown, on the first free batch thread. A request that would open a batch beyond
//! `max_enqueued_batches` is refused (429). With batching off every task is its own batch.
//!
//! A batch is one forward pass over the concatenated examples, whose outputs are split back
//! per task. In inference mode kiln's forward pass treats every example independently, and its
//! kernels give a row the same bits whatever the number of rows in the call (kiln's
//! `kernels::gemm`), so a batched request returns exactly what it returns alone.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kiln::export::Servable;
use tokio::sync::oneshot;

use crate::metrics::Metrics;

/// What a task's requester receives: the outputs `[n, units]` row-major, or a message.
pub type Reply = Result<Vec<f32>, String>;

/// Why a task was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue holds `max_enqueued_batches` batches (HTTP 429).
    QueueFull,
    /// The server is stopping (HTTP 503).
    ShuttingDown,
}

/// How the scheduler groups tasks.
#[derive(Debug, Clone, Copy)]
pub struct SchedulerOptions {
    /// Merge tasks into batches (batching on).
    pub merge: bool,
    /// Most examples per merged batch.
    pub max_batch_size: usize,
    /// How long a batch waits for company after it opens.
    pub timeout: Duration,
    /// Most batches waiting.
    pub max_enqueued: usize,
    /// Worker threads.
    pub threads: usize,
}

struct Task {
    x: Vec<f32>,
    n: usize,
    reply: oneshot::Sender<Reply>,
}

struct Batch {
    servable: Arc<Servable>,
    model: String,
    tasks: Vec<Task>,
    size: usize,
    opened: Instant,
}

#[derive(Default)]
struct Queue {
    batches: VecDeque<Batch>,
    shutdown: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    opts: SchedulerOptions,
    metrics: Arc<Metrics>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The task queue and its worker threads.
pub struct Scheduler {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Scheduler {
    /// Starts `opts.threads` worker threads.
    ///
    /// # Errors
    /// When a thread cannot be spawned.
    pub fn start(opts: SchedulerOptions, metrics: Arc<Metrics>) -> std::io::Result<Scheduler> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            opts,
            metrics,
        });
        let mut threads = Vec::new();
        for i in 0..opts.threads.max(1) {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("kiln-serve-worker-{i}"))
                    .spawn(move || worker(&s))?,
            );
        }
        Ok(Scheduler {
            shared,
            threads: Mutex::new(threads),
        })
    }

    /// Queues `n` examples `x` for `servable` (of `model`); the receiver gets the outputs.
    ///
    /// # Errors
    /// [`SubmitError::QueueFull`] when the queue is full, [`SubmitError::ShuttingDown`] after
    /// [`Scheduler::shutdown`].
    pub fn submit(
        &self,
        model: &str,
        servable: Arc<Servable>,
        x: Vec<f32>,
        n: usize,
    ) -> Result<oneshot::Receiver<Reply>, SubmitError> {
        let (tx, rx) = oneshot::channel();
        let task = Task { x, n, reply: tx };
        let opts = &self.shared.opts;
        let mut q = self.shared.lock();
        if q.shutdown {
            return Err(SubmitError::ShuttingDown);
        }
        if opts.merge
            && let Some(b) = q
                .batches
                .iter_mut()
                .rev()
                .find(|b| Arc::ptr_eq(&b.servable, &servable))
            && b.size + n <= opts.max_batch_size
        {
            b.size += n;
            b.tasks.push(task);
            if b.size >= opts.max_batch_size {
                self.shared.wake.notify_one();
            }
            return Ok(rx);
        }
        if q.batches.len() >= opts.max_enqueued {
            return Err(SubmitError::QueueFull);
        }
        q.batches.push_back(Batch {
            servable,
            model: model.to_string(),
            tasks: vec![task],
            size: n,
            opened: Instant::now(),
        });
        self.shared.metrics.queue(q.batches.len());
        drop(q);
        self.shared.wake.notify_one();
        Ok(rx)
    }

    /// Refuses new tasks, lets the workers finish every queued batch, and joins them.
    pub fn shutdown(&self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Takes ready batches and runs them until shutdown empties the queue.
fn worker(s: &Shared) {
    let opts = s.opts;
    loop {
        let batch = {
            let mut q = s.lock();
            loop {
                let now = Instant::now();
                let ready = q.batches.iter().position(|b| {
                    !opts.merge
                        || q.shutdown
                        || b.size >= opts.max_batch_size
                        || now.duration_since(b.opened) >= opts.timeout
                });
                if let Some(i) = ready {
                    let b = q.batches.remove(i).expect("index from position");
                    s.metrics.queue(q.batches.len());
                    if !q.batches.is_empty() {
                        s.wake.notify_one();
                    }
                    break b;
                }
                if q.shutdown && q.batches.is_empty() {
                    return;
                }
                q = match q.batches.iter().map(|b| b.opened + opts.timeout).min() {
                    Some(deadline) => {
                        let wait = deadline.saturating_duration_since(now);
                        s.wake
                            .wait_timeout(q, wait)
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    }
                    None => s.wake.wait(q).unwrap_or_else(|p| p.into_inner()),
                };
            }
        };
        run(s, batch);
    }
}

/// One forward pass over the batch; each task gets its rows.
fn run(s: &Shared, batch: Batch) {
    let Batch {
        servable,
        model,
        mut tasks,
        ..
    } = batch;
    // Tasks whose requester went away (client disconnected) are dropped before the work.
    tasks.retain(|t| !t.reply.is_closed());
    if tasks.is_empty() {
        return;
    }
    let size: usize = tasks.iter().map(|t| t.n).sum();
    let x = if tasks.len() == 1 {
        std::mem::take(&mut tasks[0].x)
    } else {
        let mut x = Vec::with_capacity(tasks.iter().map(|t| t.x.len()).sum());
        for t in &tasks {
            x.extend_from_slice(&t.x);
        }
        x
    };
    s.metrics.batch(&model, size);
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| servable.predict(x, size)));
    match result {
        Ok(Ok(out)) => {
            let units = out.len() / size.max(1);
            let mut offset = 0;
            for t in tasks {
                let rows = out[offset..offset + t.n * units].to_vec();
                offset += t.n * units;
                let _ = t.reply.send(Ok(rows));
            }
        }
        Ok(Err(e)) => {
            for t in tasks {
                let _ = t.reply.send(Err(e.to_string()));
            }
        }
        Err(_) => {
            for t in tasks {
                let _ = t
                    .reply
                    .send(Err("the forward pass failed (internal error)".into()));
            }
        }
    }
}
