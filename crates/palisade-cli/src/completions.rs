//! `palisade completions <shell>`: the shell's completion script, generated
//! from the same clap definition the binary parses with.

use std::io::Write as _;

use clap::CommandFactory as _;
use clap_complete::Shell;

/// `palisade completions` arguments.
#[derive(Debug, clap::Args)]
#[command(after_help = "Install, for example:\n  \
    bash: palisade completions bash > ~/.local/share/bash-completion/completions/palisade\n  \
    zsh:  palisade completions zsh > \"${fpath[1]}/_palisade\"\n  \
    fish: palisade completions fish > ~/.config/fish/completions/palisade.fish")]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Writes the completion script to standard output.
pub(crate) fn run(args: &CompletionsArgs) -> anyhow::Result<()> {
    let mut command = crate::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "palisade", &mut script);
    std::io::stdout().lock().write_all(&script)?;
    Ok(())
}
