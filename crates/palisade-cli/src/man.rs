//! `palisade man`: manual pages generated from the clap definition
//! (clap_mangen). The committed pages under `docs/man/` are this output,
//! and a test keeps them equal to it.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::CommandFactory as _;

/// `palisade man` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {
    /// Write one page per command (`palisade.1`, `palisade-lock.1`, ...) into
    /// this directory instead of printing `palisade.1` to standard output.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

/// Prints the top page, or writes every page into `--out-dir`.
pub(crate) fn run(args: &ManArgs) -> anyhow::Result<()> {
    let command = man_command();
    match &args.out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("cannot write manual pages into {}", dir.display()))?;
        }
        None => {
            // As `generate_to` prepares it, so the page is the committed one.
            let mut command = command.disable_help_subcommand(true);
            command.build();
            let mut page = Vec::new();
            clap_mangen::Man::new(command).render(&mut page)?;
            std::io::stdout().lock().write_all(&page)?;
        }
    }
    Ok(())
}

/// The command as the pages describe it: the crate version without the git
/// revision, and no environment variable's current value, so the pages are
/// the same on every machine and at every commit.
fn man_command() -> clap::Command {
    hide_env_values(crate::Cli::command().version(env!("CARGO_PKG_VERSION")))
}

fn hide_env_values(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| arg.hide_env_values(true))
        .mut_subcommands(hide_env_values)
}
