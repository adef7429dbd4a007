//! Test helpers: the Bedrock stand-in. Compiled with the `testing` feature (and in this crate's
//! own tests); production modules never use it.

pub mod bedrock_stand_in;

pub use bedrock_stand_in::{
    BedrockStandIn, Fallback, Frame, RecordedRequest, Reply, StreamScript, client_for,
};
