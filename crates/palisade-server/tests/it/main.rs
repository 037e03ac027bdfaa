//! The resource server's integration tests in one binary (one link of the
//! dependency tree): the API through its router (`common`) and on real
//! sockets (`tcp`), the served process, TLS, the dashboard, and the
//! PostgreSQL and etcd engines behind it.

mod api;
mod common;
mod connection_state;
mod crash;
mod crowd;
mod dashboard;
mod deadline;
mod direct_routes;
mod etcd_replicas;
mod events;
mod hostile;
mod openapi;
mod postgres_store;
mod round_trips;
mod security;
mod serve;
mod tcp;
mod tls;
mod ui_browser;
