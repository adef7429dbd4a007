//! Starting the project's binaries as a deployment would: on moto and the Bedrock stand-in, with
//! the AWS settings a machine without an account needs, and waiting for the address they
//! announce.

use agent_worker_testkit::{BedrockStandIn, moto};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// `binary` with `args`, its table `table` on moto, its model the Bedrock stand-in's, no AWS
/// account needed; its stderr piped (for [`announced`]) and killed when dropped.
pub fn on_moto(binary: &str, args: &[&str], table: &str, bedrock: &BedrockStandIn) -> Command {
    let mut command = Command::new(binary);
    command
        .args(args)
        .env("SYSTEM_PROMPT", "You are a helpful assistant.")
        .env("TABLE_NAME", table)
        .env("MODEL_ID", super::MODEL_ID)
        .env("EVENT_SINKS", "dynamo")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ENDPOINT_URL_DYNAMODB", moto().endpoint())
        .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", bedrock.endpoint_url())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The address `child` announces on stderr after `prefix` (the first word after it).
pub async fn announced(child: &mut Child, prefix: &str) -> String {
    let mut lines = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the server announces its address");
        if let Some(rest) = line.strip_prefix(prefix) {
            // Its stderr is still read, so that the child never blocks writing to it.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return rest.split(' ').next().unwrap_or_default().to_owned();
        }
    }
}
