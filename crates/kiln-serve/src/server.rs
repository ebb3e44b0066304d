//! Starting and stopping the server: the model registry and its version poller, the inference
//! threads, and the HTTP listener on a tokio runtime.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::config::ServeConfig;
use crate::error::ServeError;
use crate::http::{AppState, router};
use crate::metrics::Metrics;
use crate::models::Registry;
use crate::scheduler::{Scheduler, SchedulerOptions};

/// A running server (for tests and embedding); [`Server::stop`] shuts it down gracefully.
pub struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), ServeError>>>,
}

impl Server {
    /// Loads the models (the first scan of the base paths happens before this returns), binds
    /// the port and serves on a background thread.
    ///
    /// # Errors
    /// [`ServeError::Config`] for invalid settings, [`ServeError::Bind`] when the address is
    /// taken, [`ServeError::Kiln`] when the device is not available.
    pub fn start(config: ServeConfig) -> Result<Server, ServeError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("kiln-serve".into())
            .spawn(move || {
                run(
                    config,
                    async {
                        let _ = stop_rx.await;
                    },
                    |addr| {
                        let _ = ready_tx.send(addr);
                    },
                    |m| eprintln!("{m}"),
                )
            })?;
        match ready_rx.recv() {
            Ok(addr) => Ok(Server {
                addr,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            // The thread ended before binding: its error.
            Err(_) => Err(thread
                .join()
                .map_err(|_| ServeError::config("server", "the server thread panicked"))?
                .err()
                .unwrap_or_else(|| ServeError::config("server", "stopped before listening"))),
        }
    }

    /// The address it listens on (the port is the real one when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections, lets requests in flight finish, then returns.
    ///
    /// # Errors
    /// What the server thread returned.
    pub fn stop(mut self) -> Result<(), ServeError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), ServeError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| ServeError::config("server", "the server thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Serves until SIGTERM or SIGINT, then shuts down gracefully (requests in flight finish).
/// `on_ready` gets the address once the port is bound; `log` gets version load events.
///
/// # Errors
/// As [`Server::start`].
pub fn serve_until_signal(
    config: ServeConfig,
    on_ready: impl FnOnce(SocketAddr),
    log: fn(&str),
) -> Result<(), ServeError> {
    run(
        config,
        async {
            use tokio::signal::unix::{SignalKind, signal};
            match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {},
                        _ = int.recv() => {},
                    }
                }
                _ => std::future::pending::<()>().await,
            }
            eprintln!("kiln serve: stopping (requests in flight finish first)");
        },
        on_ready,
        log,
    )
}

/// A flag with a condition variable, to stop the poller promptly.
#[derive(Default)]
struct StopFlag {
    stopped: Mutex<bool>,
    wake: Condvar,
}

fn run(
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_ready: impl FnOnce(SocketAddr),
    log: fn(&str),
) -> Result<(), ServeError> {
    config.validate()?;
    let device = kiln::device::resolve(config.device)?;
    let metrics = Arc::new(Metrics::default());
    let registry = Arc::new(Registry::new(&config.models, device, metrics.clone(), log));
    registry.poll();

    let opts = match config.batching {
        Some(b) => SchedulerOptions {
            merge: true,
            max_batch_size: b.max_batch_size,
            timeout: b.timeout(),
            max_enqueued: b.max_enqueued_batches,
            threads: b.num_batch_threads,
        },
        None => SchedulerOptions {
            merge: false,
            max_batch_size: 1,
            timeout: std::time::Duration::ZERO,
            max_enqueued: config.max_enqueued_requests,
            threads: config.num_request_threads,
        },
    };
    let scheduler = Arc::new(Scheduler::start(opts, metrics.clone())?);

    let stop = Arc::new(StopFlag::default());
    let poller = {
        let (registry, stop, interval) = (registry.clone(), stop.clone(), config.poll_interval);
        std::thread::Builder::new()
            .name("kiln-serve-poller".into())
            .spawn(move || {
                loop {
                    let stopped = stop.stopped.lock().unwrap_or_else(|p| p.into_inner());
                    let (stopped, _) = stop
                        .wake
                        .wait_timeout_while(stopped, interval, |s| !*s)
                        .unwrap_or_else(|p| p.into_inner());
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    registry.poll();
                }
            })?
    };

    let state = Arc::new(AppState {
        registry,
        scheduler: scheduler.clone(),
        metrics,
        max_body_bytes: config.max_body_bytes,
        auth_token: config.auth_token.clone(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .clamp(2, 4),
        )
        .thread_name("kiln-serve-http")
        .enable_all()
        .build()?;
    let addr = format!("{}:{}", config.host, config.port);
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|reason| ServeError::Bind {
                addr: addr.clone(),
                reason,
            })?;
        on_ready(listener.local_addr()?);
        axum::serve(listener, router(state))
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ServeError::Io)
    });
    *stop.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
    stop.wake.notify_all();
    let _ = poller.join();
    scheduler.shutdown();
    served
}
