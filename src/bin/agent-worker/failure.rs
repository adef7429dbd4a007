//! [`CliError`]: how a command failed, and the exit code that says so: 2 for a usage mistake (a
//! flag or a setting that cannot be used, as clap's own refusals), 1 for work that failed (an
//! AWS call, a turn, a file the work needed).

use agent_worker::protocol::chain;
use std::process::ExitCode;

/// How a command failed.
#[derive(Debug)]
pub(crate) enum CliError {
    /// The command line, or a setting it reads, cannot be used.
    Usage(String),
    /// The work failed.
    Failed(String),
}

impl CliError {
    /// A usage mistake, as `message` says.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::Usage(message.into())
    }

    /// The line a person reads, and the exit code.
    pub(crate) fn report(self) -> ExitCode {
        match self {
            Self::Usage(message) => {
                eprintln!("error: {message}");
                ExitCode::from(2)
            }
            Self::Failed(message) => {
                eprintln!("error: {message}");
                ExitCode::from(1)
            }
        }
    }
}

/// What the work said when it failed.
impl From<String> for CliError {
    fn from(message: String) -> Self {
        Self::Failed(message)
    }
}

impl From<&str> for CliError {
    fn from(message: &str) -> Self {
        Self::Failed(message.to_owned())
    }
}

/// A setting the command reads that cannot be used is a usage mistake; one that could not be
/// read because an AWS call failed (a secret in Secrets Manager) is failed work.
impl From<agent_worker::hosts::SettingsError> for CliError {
    fn from(error: agent_worker::hosts::SettingsError) -> Self {
        let aws_failed = error
            .cause
            .as_deref()
            .is_some_and(|cause| cause.is::<agent_worker::hosts::AwsError>());
        if aws_failed {
            Self::Failed(chain(&error))
        } else {
            Self::Usage(chain(&error))
        }
    }
}
