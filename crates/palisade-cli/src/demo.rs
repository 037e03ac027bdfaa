//! `palisade demo gc-pause|flash-sale`: the demos, from the CLI.

use clap::Args;

/// Arguments of `palisade demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Which demo: `gc-pause` or `flash-sale`.
    which: String,
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "demo `{}`: run `cargo run -p example-gc-pause` for now",
        args.which
    )
}
