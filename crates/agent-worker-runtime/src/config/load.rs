//! Reading what a configuration names: OpenAPI documents from a file, `https://` or `s3://`,
//! made into tools that act as the person the configured way.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{ActAsConfig, OpenApiSource};
use agent_worker_contract::ErrorChain;
use agent_worker_core::engine::tools::Tool;
use agent_worker_core::engine::tools::openapi::{
    ActAsContext, ActAsError, OpenApiOptions, load_openapi_tools,
};

/// Where a document is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocumentSource {
    /// A file; a relative path starts beside the configuration file.
    File(String),
    /// An `https://` (or, for local runs, `http://`) URL.
    Url(String),
    /// `s3://bucket/key`.
    S3 {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
    },
}

impl DocumentSource {
    /// Reads `text` as a source.
    pub fn parse(text: &str) -> Result<Self, SourceError> {
        if let Some(rest) = text.strip_prefix("s3://") {
            return match rest.split_once('/') {
                Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => Ok(Self::S3 {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                }),
                _ => Err(SourceError::NotS3(text.to_owned())),
            };
        }
        if text.starts_with("https://") || text.starts_with("http://") {
            return Ok(Self::Url(text.to_owned()));
        }
        if text.trim().is_empty() {
            return Err(SourceError::Empty);
        }
        Ok(Self::File(text.to_owned()))
    }
}

impl std::fmt::Display for DocumentSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) | Self::Url(path) => f.write_str(path),
            Self::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
        }
    }
}

/// Why a text names no document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `s3://` without a bucket and a key.
    #[error("{0:?} is not s3://bucket/key")]
    NotS3(String),
    /// Nothing.
    #[error("is empty")]
    Empty,
}

/// Why a document could not be read; each names where it is.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// This fetcher reads no such source.
    #[error("{0} cannot be fetched here: only files")]
    Unsupported(DocumentSource),
    /// No answer came in time.
    #[error("{source_shown}: no answer within {after:?}")]
    Timeout {
        /// The document.
        source_shown: DocumentSource,
        /// How long it was given.
        after: std::time::Duration,
    },
    /// The request failed (no connection, a broken body).
    #[error("{url} cannot be fetched")]
    Http {
        /// The URL.
        url: String,
        /// What failed.
        #[source]
        cause: reqwest::Error,
    },
    /// The server answered with an error status.
    #[error("{url} answered {status}")]
    Status {
        /// The URL.
        url: String,
        /// Its status.
        status: reqwest::StatusCode,
    },
    /// An `s3://` document, and no S3 client to read it with.
    #[error("no S3 client to read s3:// with")]
    NoS3Client,
    /// S3 failed or refused.
    #[error("{location} cannot be read")]
    S3 {
        /// The document.
        location: DocumentSource,
        /// What failed.
        #[source]
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The document is not UTF-8 text.
    #[error("{location}: not UTF-8 text")]
    NotText {
        /// The document.
        location: DocumentSource,
        /// Where it stopped being text.
        #[source]
        cause: std::string::FromUtf8Error,
    },
}

/// Fetches documents that are not files.
#[async_trait]
pub trait Fetch: Send + Sync {
    /// The text at `source` (never a [`DocumentSource::File`]).
    async fn fetch(&self, source: &DocumentSource) -> Result<String, FetchError>;
}

/// Fetches nothing: for configurations whose documents are files.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRemote;

#[async_trait]
impl Fetch for NoRemote {
    async fn fetch(&self, source: &DocumentSource) -> Result<String, FetchError> {
        Err(FetchError::Unsupported(source.clone()))
    }
}

/// How long a read of one document at start-up may take, by default: a server that never
/// answers fails start-up with an error naming its URL instead of holding it forever.
pub const DEFAULT_FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Fetches over HTTP(S), and from S3 with a client, each read within a timeout.
#[derive(Debug, Clone)]
pub struct Remote {
    http: reqwest::Client,
    #[cfg(feature = "s3")]
    s3: Option<aws_sdk_s3::Client>,
    timeout: std::time::Duration,
}

impl Remote {
    /// Over `http`; `s3://` documents through `s3`.
    #[cfg(feature = "s3")]
    pub fn new(http: reqwest::Client, s3: Option<aws_sdk_s3::Client>) -> Self {
        Self {
            http,
            s3,
            timeout: DEFAULT_FETCH_TIMEOUT,
        }
    }

    /// Over `http`.
    #[cfg(not(feature = "s3"))]
    pub fn new(http: reqwest::Client) -> Self {
        Self {
            http,
            timeout: DEFAULT_FETCH_TIMEOUT,
        }
    }

    /// The same, each read given at most `timeout` (the whole of it: connecting, the answer's
    /// head and its body).
    #[must_use]
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

#[async_trait]
impl Fetch for Remote {
    async fn fetch(&self, source: &DocumentSource) -> Result<String, FetchError> {
        tokio::time::timeout(self.timeout, self.fetch_now(source))
            .await
            .unwrap_or_else(|_| {
                Err(FetchError::Timeout {
                    source_shown: source.clone(),
                    after: self.timeout,
                })
            })
    }
}

impl Remote {
    async fn fetch_now(&self, source: &DocumentSource) -> Result<String, FetchError> {
        match source {
            DocumentSource::Url(url) => {
                let failed = |cause| FetchError::Http {
                    url: url.clone(),
                    cause,
                };
                let answer = self.http.get(url).send().await.map_err(failed)?;
                if !answer.status().is_success() {
                    return Err(FetchError::Status {
                        url: url.clone(),
                        status: answer.status(),
                    });
                }
                answer.text().await.map_err(failed)
            }
            #[cfg(feature = "s3")]
            DocumentSource::S3 { bucket, key } => {
                let s3 = self.s3.as_ref().ok_or(FetchError::NoS3Client)?;
                let failed = |cause: Box<dyn std::error::Error + Send + Sync>| FetchError::S3 {
                    location: source.clone(),
                    cause,
                };
                let object = s3
                    .get_object()
                    .bucket(bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(|e| failed(Box::new(crate::AwsError::new(e))))?;
                let bytes = object.body.collect().await.map_err(|e| failed(Box::new(e)))?;
                String::from_utf8(bytes.to_vec()).map_err(|cause| FetchError::NotText {
                    location: source.clone(),
                    cause,
                })
            }
            other => NoRemote.fetch(other).await,
        }
    }
}

/// The tools of one configured document, or what is wrong with it.
pub(super) async fn openapi_tools(
    source: &OpenApiSource,
    base: &Path,
    loader: &super::Loader,
) -> Result<Vec<Arc<dyn Tool>>, Vec<String>> {
    let fetch: &dyn Fetch = loader.fetch.as_deref().unwrap_or(&NoRemote);
    let text = match DocumentSource::parse(&source.document).map_err(|e| vec![format!("document: {e}")])? {
        DocumentSource::File(path) => std::fs::read_to_string(base.join(&path))
            .map_err(|e| vec![format!("document: {path} cannot be read: {e}")])?,
        remote => fetch
            .fetch(&remote)
            .await
            .map_err(|e| vec![format!("document: {}", ErrorChain(&e))])?,
    };
    let document: Value =
        serde_yaml::from_str(&text).map_err(|e| vec![format!("document: not JSON or YAML: {e}")])?;
    if !source.base_url.starts_with("https://") && !source.base_url.starts_with("http://") {
        return Err(vec![format!(
            "baseUrl: {:?} is not an http(s) URL",
            source.base_url
        )]);
    }
    let act_as = act_as(&source.act_as, loader)
        .await
        .map_err(|e| vec![format!("actAs: {e}")])?;
    let mut options = OpenApiOptions::new(&source.base_url, act_as).audience(source.audience.into());
    if let Some(events) = &source.events {
        options = options.events(events.clone());
    }
    if let Some(waiter) = &loader.waiter {
        options = options.waiter(waiter.clone());
    }
    load_openapi_tools(&document, options).map_err(|e| {
        e.problems
            .into_iter()
            .map(|p| format!("document: operation {}: {}", p.operation, p.reason))
            .collect()
    })
}

/// The headers a call acts as the person with.
type ActAsFn = Box<dyn Fn(&ActAsContext) -> Result<Vec<(String, String)>, ActAsError> + Send + Sync>;

/// How calls act as the person: the token, the ids and a signed assertion as the configuration
/// says, and a call that needs what the turn does not carry fails, telling the model why.
async fn act_as(config: &ActAsConfig, loader: &super::Loader) -> Result<ActAsFn, String> {
    if config.token.is_none()
        && config.user_id_header.is_none()
        && config.account_id_header.is_none()
        && config.assertion.is_none()
    {
        return Err(
            "give token, userIdHeader, accountIdHeader or assertion: calls must say whom they are for".into(),
        );
    }
    let signer = match &config.assertion {
        Some(assertion) => Some(
            super::assertion::Signer::start(assertion, loader.secrets.clone())
                .await
                .map_err(|e| format!("assertion.{e}"))?,
        ),
        None => None,
    };
    let config = config.clone();
    Ok(Box::new(move |ctx: &ActAsContext| {
        let mut headers = Vec::new();
        if let Some(signer) = &signer {
            headers.push(signer.header(ctx)?);
        }
        if let Some(token) = &config.token {
            let given = ctx
                .user_token
                .as_ref()
                .ok_or("the turn carries no userToken, and this API needs the person's token")?;
            headers.push((
                token.header.clone(),
                format!("{}{}", token.prefix, given.expose()),
            ));
        }
        for (header, id, what) in [
            (&config.user_id_header, &ctx.user_id, "userId"),
            (&config.account_id_header, &ctx.account_id, "accountId"),
        ] {
            if let Some(header) = header {
                let id = id.as_ref().ok_or(format!("the turn names no {what}"))?;
                headers.push((header.clone(), id.clone()));
            }
        }
        Ok(headers)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_worker_contract::UserToken;

    #[test]
    fn sources_are_files_urls_or_s3_objects() {
        assert_eq!(
            DocumentSource::parse("s3://b/k/d.json").unwrap(),
            DocumentSource::S3 {
                bucket: "b".into(),
                key: "k/d.json".into()
            }
        );
        assert!(DocumentSource::parse("s3://b").is_err());
        assert_eq!(
            DocumentSource::parse("https://x/d.json").unwrap(),
            DocumentSource::Url("https://x/d.json".into())
        );
        assert_eq!(
            DocumentSource::parse("d.yaml").unwrap(),
            DocumentSource::File("d.yaml".into())
        );
    }

    #[tokio::test]
    async fn a_call_acts_as_the_person_or_says_why_it_cannot() {
        let config: ActAsConfig = serde_yaml::from_str(
            "token: { header: Authorization, prefix: 'Bearer ' }\naccountIdHeader: x-account",
        )
        .unwrap();
        let headers_for = act_as(&config, &crate::config::Loader::default()).await.unwrap();
        let mut ctx = ActAsContext {
            user_id: Some("ana".into()),
            account_id: Some("acme".into()),
            session: agent_worker_core::session::SessionId::new("s").unwrap(),
            turn_id: agent_worker_core::session::TurnId::new("t1").unwrap(),
            tool: "t".into(),
            user_token: Some(UserToken::new("tok-1")),
        };
        assert_eq!(
            headers_for(&ctx).unwrap(),
            [
                ("Authorization".to_owned(), "Bearer tok-1".to_owned()),
                ("x-account".to_owned(), "acme".to_owned())
            ]
        );
        ctx.user_token = None;
        assert!(headers_for(&ctx).unwrap_err().to_string().contains("userToken"));
        assert!(
            act_as(&ActAsConfig::default(), &crate::config::Loader::default())
                .await
                .is_err()
        );
    }
}

#[cfg(test)]
mod fetch_tests {
    use super::*;

    #[tokio::test]
    async fn a_server_that_never_answers_fails_the_read_naming_its_url() {
        // A listener that takes the connection and says nothing.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/openapi.json", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            std::future::pending::<()>().await;
            drop(socket);
        });
        #[cfg(feature = "s3")]
        let remote = Remote::new(reqwest::Client::new(), None);
        #[cfg(not(feature = "s3"))]
        let remote = Remote::new(reqwest::Client::new());
        let error = remote
            .with_timeout(std::time::Duration::from_millis(200))
            .fetch(&DocumentSource::Url(url.clone()))
            .await
            .unwrap_err();
        assert!(matches!(error, FetchError::Timeout { .. }), "{error:?}");
        assert_eq!(error.to_string(), format!("{url}: no answer within 200ms"));
        held.abort();
    }
}
