//! `validate`: checks a folder of Standard Agents definitions.

use crate::failure::CliError;
use std::path::PathBuf;
use std::process::ExitCode;

use agent_worker::engine::tools::examples;
use agent_worker::protocol::chain;

#[derive(Debug, clap::Args)]
pub(crate) struct ValidateArgs {
    /// The folder holding agents/ and prompts/.
    pub(crate) folder: PathBuf,
    /// A handler registered outside this binary (relay_pipe is built in); repeatable.
    #[arg(long = "handler")]
    pub(crate) handlers: Vec<String>,
    /// A hook registered outside this binary; repeatable.
    #[arg(long = "hook")]
    pub(crate) hooks: Vec<String>,
    /// A tool registered outside this binary; repeatable.
    #[arg(long = "tool")]
    pub(crate) tools: Vec<String>,
    /// Print the issues as one JSON list.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn validate(args: ValidateArgs) -> Result<ExitCode, CliError> {
    use agent_worker::agents::{Catalog, Known, has_errors};
    let mut known = Known::with_builtins();
    known
        .tools
        .extend(examples::NAMES.iter().map(|n| (*n).to_owned()));
    known.tools.extend(args.tools);
    known.handlers.extend(args.handlers);
    known.hooks.extend(args.hooks);
    let (catalog, issues) = Catalog::load(&args.folder, &known).map_err(|e| chain(&e))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&issues).map_err(|e| chain(&e))?
        );
    } else {
        for issue in &issues {
            println!("{issue}");
        }
        eprintln!(
            "{}: {} agents, {} prompts, {} errors, {} warnings",
            args.folder.display(),
            catalog.agents().count(),
            catalog.prompts().count(),
            issues
                .iter()
                .filter(|i| i.severity == agent_worker::agents::Severity::Error)
                .count(),
            issues
                .iter()
                .filter(|i| i.severity == agent_worker::agents::Severity::Warning)
                .count(),
        );
    }
    Ok(if has_errors(&issues) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
