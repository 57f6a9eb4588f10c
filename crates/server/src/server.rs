//! Starting and stopping: [`serve`] on a listener until a shutdown signal, then draining;
//! [`run`] with its own runtime and the process's signals, for `kindle serve`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use kindle_generate::PagedModel;
use tokio::net::TcpListener;

use crate::app::AppState;
use crate::codec::TextCodec;
use crate::config::ServerConfig;
use crate::draft::Drafting;
use crate::engine::{self, Command, EngineOptions};
use crate::error::ServerError;
use crate::metrics::Metrics;
use crate::response::now_seconds;
use crate::routes::router;

/// Serve `model` on `listener` until `shutdown` resolves, then drain: new requests get 503
/// (and `/health` too), running and queued requests finish for up to
/// [`ServerConfig::drain_timeout`], what is left is cancelled, and the function returns.
///
/// The model (and the draft model, with which requests draft unless they say otherwise: see
/// [`crate::draft`]) moves to the engine thread, which owns it and every sequence's cache.
pub async fn serve<M, C>(
    listener: TcpListener,
    model: M,
    drafting: Option<Drafting>,
    codec: C,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError>
where
    M: PagedModel + Send + 'static,
    C: TextCodec,
{
    config.validate()?;
    let metrics = Arc::new(Metrics::default());
    let codec = Arc::new(codec);
    let options = EngineOptions {
        parallel: config.parallel,
        step_tokens: config.step_tokens,
        prefix_cache: config.prefix_cache,
        pool_blocks: config.pool_blocks(),
        block_size: config.block_size,
    };
    let draft = drafting.as_ref().map(Drafting::defaults);
    let (engine, thread) = engine::spawn(
        model,
        drafting,
        Arc::clone(&codec),
        options,
        Arc::clone(&metrics),
    )?;
    let draining = Arc::new(AtomicBool::new(false));
    let drain_timeout = config.drain_timeout;
    let header_timeout = config.header_timeout;
    let state = Arc::new(AppState {
        codec,
        engine: engine.clone(),
        metrics: Arc::clone(&metrics),
        config,
        draining: Arc::clone(&draining),
        started: now_seconds(),
        draft,
    });
    let drain = async move {
        shutdown.await;
        draining.store(true, Ordering::SeqCst);
        tracing::info!("draining: no new requests; waiting for running ones");
        let deadline = Instant::now() + drain_timeout;
        while Instant::now() < deadline
            && (metrics.running.load(Ordering::SeqCst) > 0
                || metrics.queued.load(Ordering::SeqCst) > 0)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Whatever still runs is cancelled: its stream ends, its connection closes.
        engine.send(Command::Shutdown);
    };
    let app = router(state);
    let served = accept_until(listener, app, header_timeout, drain).await;
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    served
}

/// Accept connections and serve `app` on each (HTTP/1.1 on hyper, as `axum::serve` does, plus
/// a header read timeout) until `drain` resolves; then stop accepting, let the open
/// connections finish (idle keep-alive ones close at once) and return.
///
/// The header timeout runs from the moment a connection waits for a request until the
/// request's headers are in: a client that connects and sends nothing, sends its headers
/// slowly, or keeps a connection open idle between requests is cut off after it, so it
/// cannot hold a connection (nor, later, a slot) indefinitely. The body then has
/// [`ServerConfig::body_timeout`]; a response is never timed out (a long generation streams
/// for as long as it needs).
async fn accept_until(
    listener: TcpListener,
    app: axum::Router,
    header_timeout: Duration,
    drain: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    let connections = GracefulShutdown::new();
    let mut drain = std::pin::pin!(drain);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, then go on accepting.
                        tracing::warn!("accepting a connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Streamed tokens go out as soon as they are written.
                let _ = stream.set_nodelay(true);
                let service = TowerToHyperService::new(app.clone());
                let connection = connections.watch(http.serve_connection(TokioIo::new(stream), service));
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!("connection ended: {e}");
                    }
                });
            }
            () = &mut drain => break,
        }
    }
    drop(listener);
    connections.shutdown().await;
    Ok(())
}

/// Run the server on `addr` with a runtime of its own until ctrl-c or SIGTERM (`drafting`: as
/// for [`serve`]); `on_listening` hears the bound address (port 0 picks a free one). Returns
/// when drained.
///
/// The KV pool is made before the address is bound, so that a pool the machine cannot hold is
/// an error before anything listens.
pub fn run<M, C>(
    addr: SocketAddr,
    mut model: M,
    drafting: Option<Drafting>,
    codec: C,
    config: ServerConfig,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServerError>
where
    M: PagedModel + Send + 'static,
    C: TextCodec,
{
    config.validate()?;
    engine::open_pool(
        &mut model,
        config.pool_blocks(),
        config.block_size,
        config.parallel,
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(addr).await?;
        on_listening(listener.local_addr()?);
        serve(listener, model, drafting, codec, config, shutdown_signal()).await
    })
}

/// Resolves on ctrl-c or (on Unix) SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
