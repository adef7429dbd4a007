//! moto's server: DynamoDB and SQS on a real wire API, on 127.0.0.1, for tests.
//!
//! [`moto`] starts one server per test process (or uses `MOTO_ENDPOINT` when set). The server
//! is `scripts/moto_server.py` run by the project's venv (`.venv/bin/python`, which `make test`
//! installs moto into): moto with DynamoDB calls taken one at a time, so that conditional writes
//! are atomic as in DynamoDB. It runs under a small shell that kills it when the test process's
//! end of a pipe closes, so no server outlives its tests.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};

/// A running moto server.
#[derive(Debug)]
pub struct Moto {
    endpoint: String,
    /// Kept open for the life of the process: when it closes, the server is killed.
    _lifeline: Option<Mutex<(Child, ChildStdin)>>,
}

impl Moto {
    /// The endpoint URL, for `endpoint_url` or `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A DynamoDB client on this server.
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        dynamodb_client(&self.endpoint)
    }

    /// An SQS client on this server.
    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        sqs_client(&self.endpoint)
    }

    /// An S3 client on this server (path-style addressing).
    pub fn s3(&self) -> aws_sdk_s3::Client {
        let config = aws_sdk_s3::config::Builder::from(&self.shared())
            .force_path_style(true)
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }

    /// A Secrets Manager client on this server.
    pub fn secrets_manager(&self) -> aws_sdk_secretsmanager::Client {
        aws_sdk_secretsmanager::Client::new(&self.shared())
    }

    /// An SSM client on this server.
    pub fn ssm(&self) -> aws_sdk_ssm::Client {
        aws_sdk_ssm::Client::new(&self.shared())
    }

    /// What every client of this server shares: its endpoint, a region, moto's credentials.
    pub fn shared(&self) -> aws_config::SdkConfig {
        aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(&self.endpoint)
            .credentials_provider(aws_credential_types::provider::SharedCredentialsProvider::new(
                aws_credential_types::Credentials::new("moto", "moto", None, None, "moto"),
            ))
            .build()
    }
}

/// The ARN of the queue at `url`, as a record from it carries in `eventSourceARN`.
pub async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    use aws_sdk_sqs::types::QueueAttributeName;
    let answer = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("the queue's attributes");
    answer
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .expect("the queue's ARN")
}

/// A DynamoDB client on `endpoint` with dummy credentials.
pub fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("moto", "moto", None, None, "moto"))
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// An SQS client on `endpoint` with dummy credentials.
pub fn sqs_client(endpoint: &str) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "moto", "moto", None, None, "moto",
        ))
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

static MOTO: OnceLock<Result<Moto, String>> = OnceLock::new();

/// The process's moto server, started on first use. Panics, saying how to get moto, when it
/// cannot start: a test that needs moto must not pass without it.
pub fn moto() -> &'static Moto {
    match MOTO.get_or_init(|| start().map_err(|e| e.to_string())) {
        Ok(moto) => moto,
        Err(e) => panic!(
            "moto's server is needed and did not start: {e}. `make test` installs it into .venv; \
             or set MOTO_PYTHON to a Python that has moto, or MOTO_ENDPOINT to a running server"
        ),
    }
}

/// The Python that has moto: `MOTO_PYTHON`, else the project's venv.
fn moto_python() -> PathBuf {
    if let Some(path) = std::env::var_os("MOTO_PYTHON") {
        return PathBuf::from(path);
    }
    crate::workspace_root().join(".venv/bin/python")
}

fn start() -> io::Result<Moto> {
    if let Ok(endpoint) = std::env::var("MOTO_ENDPOINT") {
        return Ok(Moto {
            endpoint,
            _lifeline: None,
        });
    }
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let python = moto_python();
    let launcher = crate::workspace_root().join("scripts/moto_server.py");
    let binary = python.clone();
    // The shell starts moto, then waits on its stdin; when this process exits, the pipe closes
    // and the shell kills moto.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#""$0" "$1" -H 127.0.0.1 -p "$2" >/dev/null 2>&1 & pid=$!; read -r _; kill "$pid""#)
        .arg(&python)
        .arg(&launcher)
        .arg(port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("no stdin pipe"))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let started = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!("{} exited: {status}", binary.display())));
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(io::Error::other(format!(
                "{} did not listen on {addr} within 60 s",
                binary.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Moto {
        endpoint: format!("http://{addr}"),
        _lifeline: Some(Mutex::new((child, stdin))),
    })
}
