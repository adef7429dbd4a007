//! The Bedrock stand-in for tests/engine_*.rs.

use agent_worker_testkit::BedrockStandIn;

pub async fn stand_in() -> BedrockStandIn {
    BedrockStandIn::start().await.expect("the stand-in starts")
}
