//! The AWS SDK configuration a binary loads from its environment: the roots its clients trust
//! ([`AwsTrust`]), and the credentials and region the environment holds, read directly.
//!
//! The SDK's default chains look for credentials in the environment, then a profile, a web
//! identity token, the container's and the instance's metadata service; for the region, the
//! environment, a profile, the instance's metadata. Building those providers costs a cold start
//! some 7% of its CPU (a profile of `invoke`; the web identity provider builds an STS client),
//! though in a Lambda function, whose environment always holds both, the chains stop at the
//! first. So when the environment holds credentials (`AWS_ACCESS_KEY_ID` and
//! `AWS_SECRET_ACCESS_KEY`, not blank) they are read by the environment's provider alone, the
//! one the chain would have chosen; likewise the region (`AWS_REGION`, else
//! `AWS_DEFAULT_REGION`). Otherwise the SDK's chains run as ever.

use aws_config::environment::{EnvironmentVariableCredentialsProvider, EnvironmentVariableRegionProvider};

use crate::aws_tls::AwsTrust;

/// How a binary's SDK configuration is loaded (see the module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AwsLoader {
    trust: AwsTrust,
    credentials_in_environment: bool,
    region_in_environment: bool,
}

impl AwsLoader {
    /// The loader `get` describes (the environment, for a binary): the roots
    /// [`AWS_TLS_ROOTS`](crate::aws_tls::AWS_TLS_ROOTS) names, and whether it holds credentials
    /// and a region. A wrong `AWS_TLS_ROOTS` fails, naming it.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, crate::SettingsError> {
        let set = |name: &str| get(name).is_some_and(|value| !value.trim().is_empty());
        Ok(Self {
            trust: AwsTrust::from_lookup(&get)?,
            credentials_in_environment: set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY"),
            region_in_environment: set("AWS_REGION") || set("AWS_DEFAULT_REGION"),
        })
    }

    /// The SDK configuration's loader: the SDK's latest behaviour, an HTTPS client trusting
    /// these roots, and the environment's own providers where it holds what they read.
    pub fn loader(self) -> aws_config::ConfigLoader {
        let mut loader = self.trust.loader();
        if self.credentials_in_environment {
            loader = loader.credentials_provider(EnvironmentVariableCredentialsProvider::new());
        }
        if self.region_in_environment {
            loader = loader.region(EnvironmentVariableRegionProvider::new());
        }
        loader
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn only_credentials_and_a_region_the_environment_holds_whole_skip_the_chains() {
        let both = AwsLoader::from_lookup(lookup(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
        ]))
        .unwrap();
        assert!(both.credentials_in_environment && both.region_in_environment);
        let partial = AwsLoader::from_lookup(lookup(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "  "),
        ]))
        .unwrap();
        assert!(!partial.credentials_in_environment && !partial.region_in_environment);
        assert!(AwsLoader::from_lookup(lookup(&[("AWS_TLS_ROOTS", "nobody")])).is_err());
    }
}
