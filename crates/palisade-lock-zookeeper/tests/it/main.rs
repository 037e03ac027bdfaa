//! Integration tests of the ZooKeeper lock backend, against real ZooKeeper
//! processes started on loopback by the testkit (or the ZooKeeper named by
//! `PALISADE_ZOOKEEPER`). No test here mocks ZooKeeper.

mod changes;
mod conformance;
mod crash;
mod fixtures;
mod floor;
mod inspect;
mod kazoo;
mod metrics;
mod signing;
