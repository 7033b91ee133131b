//! What the supervisor and the workers both read from the kernel. One reader of
//! `/proc` for both sides, so the parsing rules (a command name may hold spaces and
//! parentheses; a process may vanish between two reads) live in one place. And what
//! every process that starts another shares: which descriptors reach the program it
//! runs ([`fds`]); a poisoned lock still used ([`sync::lock`]). And the record of a staged command's held changes ([`staged`]): the
//! exec worker writes it, the supervisor applies it.

pub mod fds;
pub mod hex;
pub mod procfs;
pub mod staged;
pub mod sync;
