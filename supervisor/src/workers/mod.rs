//! Worker processes and their supervision: one [`pool`] per tool group, one
//! [`worker`] actor per process (spawned by [`spawn`], restarted by the [`restart`]
//! policy, watched for memory by [`watchdog`]), and the fair wait queue ([`fairq`]) in
//! front of each group; external workers are [`confine`]d to the command sandbox.

pub mod confine;
pub mod fairq;
pub mod groups;
pub mod init;
pub mod paths;
pub mod pool;
pub mod restart;
pub mod spawn;

pub mod worker;
