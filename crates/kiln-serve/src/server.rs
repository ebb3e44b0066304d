//! Starting and stopping the server: the model registry and its version poller, the inference
//! threads, and the HTTP listener on a tokio runtime.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

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
        body_read_timeout: config.body_read_timeout,
        parse_slots: Arc::new(tokio::sync::Semaphore::new(
            std::thread::available_parallelism().map_or(2, |n| n.get()),
        )),
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
        serve_connections(
            listener,
            router(state),
            config.header_read_timeout,
            shutdown,
        )
        .await
        .map_err(ServeError::Io)
    });
    *stop.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
    stop.wake.notify_all();
    let _ = poller.join();
    scheduler.shutdown();
    served
}

/// Accepts connections until `shutdown`, serving each with hyper's HTTP/1 server: a request
/// head must arrive within `header_timeout` (an idle keep-alive connection waits that long
/// too), the connection is closed otherwise; a client that half-closes its side after a
/// request still gets the response. On `shutdown`, idle connections close, requests in flight
/// finish, then this returns.
async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Every connection task holds a receiver; `closed()` resolves when all are gone.
    let (signal_tx, signal_rx) = tokio::sync::watch::channel(());
    let (done_tx, done_rx) = tokio::sync::watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .half_close(true)
        .keep_alive(true);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match stream {
            Ok((stream, _)) => stream,
            // Out of file descriptors and the like: wait a little instead of spinning.
            Err(e) if !is_connection_error(&e) => {
                eprintln!("kiln serve: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(_) => continue,
        };
        let _ = stream.set_nodelay(true);
        let conn =
            http.serve_connection(hyper_util::rt::TokioIo::new(stream), service(app.clone()));
        tokio::spawn(serve_one(conn, signal_rx.clone(), done_rx.clone()));
    }
    drop(listener);
    let _ = signal_tx.send(());
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}

/// The router as a hyper service whose futures are boxed (so that the connection can be run
/// without shutting its socket down, see [`serve_one`]).
fn service(
    app: axum::Router,
) -> impl hyper::service::Service<
    axum::http::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = BoxedResponse,
> + Unpin {
    let tower = hyper_util::service::TowerToHyperService::new(app);
    hyper::service::service_fn(move |request| -> BoxedResponse {
        Box::pin(hyper::service::Service::call(&tower, request))
    })
}

type BoxedResponse = std::pin::Pin<
    Box<dyn Future<Output = Result<axum::response::Response, std::convert::Infallible>> + Send>,
>;

/// Serves one connection until it ends (the client closes it, a timeout, `Connection: close`)
/// or `signal` asks for a graceful shutdown, then closes it with [`linger_close`].
async fn serve_one<S>(
    conn: hyper::server::conn::http1::Connection<hyper_util::rt::TokioIo<tokio::net::TcpStream>, S>,
    mut signal: tokio::sync::watch::Receiver<()>,
    done: tokio::sync::watch::Receiver<()>,
) where
    S: hyper::service::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Unpin,
    S::Future: Unpin + Send + 'static,
{
    let mut conn = conn;
    let mut signalled = false;
    loop {
        tokio::select! {
            _ = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => break,
            changed = signal.changed(), if !signalled => {
                signalled = true;
                if changed.is_ok() {
                    std::pin::Pin::new(&mut conn).graceful_shutdown();
                }
            }
        }
    }
    linger_close(conn.into_parts().io.into_inner()).await;
    drop(done);
}

/// Closes a connection the way HTTP/1.1 servers must when the client may still be sending
/// (RFC 9112, section 9.6): first the sending side only, then whatever the client still sends
/// is read and dropped until it closes its side too (at most [`LINGER`], at most
/// [`LINGER_BYTES`]). Closing at once with unread bytes makes the kernel send a reset, which can
/// destroy the response before the client has read it.
async fn linger_close(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if stream.shutdown().await.is_err() {
        return;
    }
    let drain = async {
        let mut buf = [0u8; 8192];
        let mut left = LINGER_BYTES;
        while let Ok(n @ 1..) = stream.read(&mut buf).await {
            left = left.saturating_sub(n);
            if left == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// How long [`linger_close`] waits for the client to close its side.
const LINGER: Duration = Duration::from_secs(2);
/// How much [`linger_close`] reads (and drops) at most.
const LINGER_BYTES: usize = 1 << 20;

/// Errors of one connection (the client went away before `accept` returned), not of the
/// listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}
