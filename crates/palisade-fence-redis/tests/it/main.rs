//! The fence against real Redis: one server and a 3-master cluster from
//! `palisade-testkit`.

mod cluster;
mod common;
mod durability;
mod flash_sale;
mod library;
mod rule_table;
mod single;
