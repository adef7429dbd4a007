//! Test helpers: the Bedrock stand-in and moto's server. Compiled with the `testing` feature (and in this crate's
//! own tests); production modules never use it.

pub mod bedrock_stand_in;
pub mod moto;

pub use bedrock_stand_in::{
    BedrockStandIn, Fallback, Frame, RecordedRequest, Reply, StreamScript, client_for,
};
pub use moto::{Moto, moto};
