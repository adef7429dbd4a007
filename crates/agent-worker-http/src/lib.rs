//! The HTTP edge every agent-worker server shares (the container host, the Agent Protocol
//! server): [`serve`], the one accept loop, within limits; and [`api_key`], the shared secrets a
//! caller presents, checked one way for every host that takes one.
//!
//! It depends on the contract alone of agent-worker's crates: a server built on it brings its
//! own routes.

#![forbid(unsafe_code)]

pub mod api_key;
pub mod serve;
