//! Connections: the [`listener`] accepts them, one [`actor`] per connection speaks the
//! protocol, its [`outbox`] bounds what waits to be written, and [`events`] /
//! [`subscribe`] carry the event topics. [`peer`] tells a person's client from a
//! command toolvisor runs.

pub mod actor;
pub mod events;
pub mod listener;
pub mod outbox;
pub mod peer;
pub mod subscribe;
