//! Run with: cargo run -p example-gc-pause
fn main() {}
