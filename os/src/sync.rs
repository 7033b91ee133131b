//! A mutex whose holder panicked is still used: every state kept behind one in
//! toolvisor is consistent between statements, so a panic elsewhere must not take the
//! process down with it.

use std::sync::{Mutex, MutexGuard};

/// Lock `m`, taking the guard back from a poisoned lock.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
