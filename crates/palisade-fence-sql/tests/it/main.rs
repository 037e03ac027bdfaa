//! The SQL fence's integration tests in one binary (one link of the
//! dependency tree): one suite (`suite`), run on a real PostgreSQL
//! (`postgres`) and a real MariaDB (`mariadb`), each started on loopback by
//! the testkit.

mod common;
mod mariadb;
mod postgres;
mod secrets;
mod suite;
mod tls;
