//! `demo-child`: the client processes of the demos in `palisade-demo`, for
//! the `demos` tests.
//!
//! The demos re-run a binary of their host as client A of the GC-pause
//! story (`--pause sigstop`) and as flash-sale buyers on etcd and Redis.
//! The example binaries and `palisade` host that role themselves; a test
//! binary cannot, so the tests point `palisade_demo::ChildLauncher` here.
//! It takes one argument, the JSON spec the demo writes, and speaks the
//! demo's line protocol on standard input and output.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let Some(spec) = std::env::args().nth(1) else {
        eprintln!("usage: demo-child <spec>   (started by the demos, not by hand)");
        return ExitCode::from(2);
    };
    match palisade_demo::run_child(&spec).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo-child: {error}");
            ExitCode::FAILURE
        }
    }
}
