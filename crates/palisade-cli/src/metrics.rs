//! `palisade lock --metrics-listen ADDR`: the lock side's metrics
//! ([`LockMetrics`]) served as OpenMetrics text at `http://ADDR/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use palisade_metrics::LockMetrics;
use prometheus_client::registry::Registry;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `addr` and serves the metrics there until the process exits;
/// returns the metrics to report into.
pub(crate) async fn serve(addr: SocketAddr) -> anyhow::Result<LockMetrics> {
    let metrics = LockMetrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let registry = Arc::new(registry);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--metrics-listen {addr}: cannot listen"))?;
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let registry = Arc::clone(&registry);
            async move {
                let mut text = String::new();
                match prometheus_client::encoding::text::encode(&mut text, &registry) {
                    Ok(()) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
                    Err(error) => {
                        tracing::error!(%error, "encoding the lock metrics failed");
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response()
                    }
                }
            }
        }),
    );
    tracing::info!(%addr, "serving lock metrics");
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::warn!(%error, "the metrics listener stopped");
        }
    });
    Ok(metrics)
}
