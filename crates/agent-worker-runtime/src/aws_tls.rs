//! Which certificate authorities the AWS SDK's clients trust, and the SDK configuration built on
//! them.
//!
//! The SDK's default HTTPS client trusts the operating system's roots: at start-up it reads
//! every certificate the system holds (on Debian, a bundle and a directory of some 300 files)
//! and decodes each from PEM, about 4 ms of CPU, which at 128 MB's share of a vCPU is some
//! 50 ms of a cold start. The AWS service endpoints of the commercial regions present
//! certificates of Amazon Trust Services, so by default ([`AwsTrust::Amazon`]) the clients trust
//! those five roots alone, kept in the binary (`amazon_roots.pem`): nothing is read, five
//! certificates are decoded. An endpoint with a certificate of another authority (an HTTPS proxy
//! that inspects traffic, a local emulator with its own certificate, a partition whose endpoints
//! another authority signs) needs the system's roots: `AWS_TLS_ROOTS=system`
//! ([`AwsTrust::System`]), which is also the default when `SSL_CERT_FILE` or `SSL_CERT_DIR` is
//! set. The clients of tools, MCP servers and other providers are not the
//! SDK's, and keep the system's roots.

use std::fmt;
use std::str::FromStr;

use aws_smithy_http_client::tls::rustls_provider::CryptoMode;
use aws_smithy_http_client::tls::{self, TlsContext, TrustStore};
use aws_smithy_http_client::{Builder, ConnectorBuilder, proxy::ProxyConfig};

/// The setting that chooses the SDK clients' roots.
pub const AWS_TLS_ROOTS: &str = "AWS_TLS_ROOTS";

/// The settings by which the system's certificates are named to OpenSSL and rustls.
const SYSTEM_CERT_SETTINGS: [&str; 2] = ["SSL_CERT_FILE", "SSL_CERT_DIR"];

/// The roots of Amazon Trust Services, as PEM.
const AMAZON_ROOTS_PEM: &[u8] = include_bytes!("amazon_roots.pem");

/// Which certificate authorities the AWS SDK's clients trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AwsTrust {
    /// Amazon Trust Services' roots alone, kept in the binary (`amazon`, the default).
    #[default]
    Amazon,
    /// The operating system's roots, read at start-up (`system`): the SDK's own default.
    System,
}

/// A value of [`AWS_TLS_ROOTS`] that names no trust.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a choice of roots: `amazon` (the default) or `system`")]
pub struct UnknownTrust(String);

impl FromStr for AwsTrust {
    type Err = UnknownTrust;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            "" | "amazon" => Ok(Self::Amazon),
            "system" => Ok(Self::System),
            other => Err(UnknownTrust(other.to_owned())),
        }
    }
}

impl fmt::Display for AwsTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Amazon => "amazon",
            Self::System => "system",
        })
    }
}

impl AwsTrust {
    /// The trust [`AWS_TLS_ROOTS`] names in `get` (the environment, for a binary); a wrong
    /// value fails, naming the setting.
    ///
    /// Unset, it is [`Amazon`](Self::Amazon), unless `SSL_CERT_FILE` or `SSL_CERT_DIR` is set:
    /// whoever names the system's certificates that way means them (a company's own authority),
    /// and gets [`System`](Self::System).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, crate::SettingsError> {
        match get(AWS_TLS_ROOTS) {
            Some(value) => value
                .parse()
                .map_err(|e: UnknownTrust| crate::SettingsError::new(AWS_TLS_ROOTS, e.to_string())),
            None if SYSTEM_CERT_SETTINGS.iter().any(|name| get(name).is_some()) => Ok(Self::System),
            None => Ok(Self::Amazon),
        }
    }

    /// The SDK configuration's loader with these roots: the environment's credentials, region
    /// and endpoints, the SDK's latest behaviour, and an HTTPS client that trusts them (with
    /// [`System`](Self::System), the SDK's own default client).
    pub fn loader(self) -> aws_config::ConfigLoader {
        let loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        match self {
            Self::Amazon => loader.http_client(amazon_https_client()),
            Self::System => loader,
        }
    }
}

/// The SDK's default HTTPS client (rustls on aws-lc, the proxy the environment names, the
/// runtime's timeouts and sleep), trusting Amazon Trust Services' roots alone. (The SDK names
/// its type in every client crate's `config`; DynamoDB's is the one this crate has at hand.)
fn amazon_https_client() -> aws_sdk_dynamodb::config::SharedHttpClient {
    let trust = TrustStore::empty()
        .with_native_roots(false)
        .with_pem_certificate(AMAZON_ROOTS_PEM);
    // The builder checks nothing (the PEM is read when a connector is made, and the tests read
    // it): it cannot fail, and were it to, the connector would keep the SDK's own roots.
    let context = TlsContext::builder().with_trust_store(trust).build().ok();
    Builder::new().build_with_connector_fn(move |settings, components| {
        let mut connector =
            ConnectorBuilder::default().tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc));
        if let Some(context) = &context {
            connector.set_tls_context(context.clone());
        }
        connector.set_connector_settings(settings.cloned());
        if let Some(components) = components {
            connector.set_sleep_impl(components.sleep_impl());
        }
        connector.set_proxy_config(Some(ProxyConfig::from_env()));
        connector.build()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_certificates_named_by_their_own_settings_are_the_default_then() {
        let named = |name: &str| (name == "SSL_CERT_FILE").then(|| "/etc/corp/ca.pem".to_owned());
        assert_eq!(AwsTrust::from_lookup(named), Ok(AwsTrust::System));
        assert_eq!(AwsTrust::from_lookup(|_| None), Ok(AwsTrust::Amazon));
        let both = |name: &str| match name {
            AWS_TLS_ROOTS => Some("amazon".to_owned()),
            _ => Some("/etc/corp".to_owned()),
        };
        assert_eq!(AwsTrust::from_lookup(both), Ok(AwsTrust::Amazon));
        let wrong = AwsTrust::from_lookup(|name| (name == AWS_TLS_ROOTS).then(|| "all".to_owned()));
        assert!(wrong.unwrap_err().to_string().contains(AWS_TLS_ROOTS));
    }

    #[test]
    fn the_setting_reads_amazon_by_default_and_names_a_wrong_value() {
        assert_eq!("".parse(), Ok(AwsTrust::Amazon));
        assert_eq!("amazon".parse(), Ok(AwsTrust::Amazon));
        assert_eq!(" system ".parse(), Ok(AwsTrust::System));
        assert_eq!(
            "all".parse::<AwsTrust>().unwrap_err().to_string(),
            "`all` is not a choice of roots: `amazon` (the default) or `system`"
        );
    }

    #[test]
    fn the_kept_roots_are_amazon_trust_services_five() {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject as _;
        let roots: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(AMAZON_ROOTS_PEM)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(roots.len(), 5);
    }
}
