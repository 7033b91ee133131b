//! Connections: the [`listener`] accepts them, one [`actor`] per connection speaks the
//! protocol (its calls, batches and envelopes in `calls`, their ids and cancel tokens in
//! `open`, its socket's reader and writer tasks in `io`), its [`outbox`] bounds what waits to be written, and [`events`] /
//! [`subscribe`] carry the event topics. [`peer`] tells a person's client from a
//! command toolvisor runs. [`hook`] records the calls agent hosts run with their own
//! tools.

pub mod actor;
mod calls;
pub mod events;
mod hook;
mod io;
pub mod listener;
mod open;
pub mod outbox;
pub mod peer;
pub mod subscribe;
