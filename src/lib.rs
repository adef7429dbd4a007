//! stub
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod protocol;
pub mod session;
pub mod engine;
#[cfg(feature = "testing")]
pub mod testing;
