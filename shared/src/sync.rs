//! Locks that outlive a panic: a thread that panicked while holding one leaves the value as it
//! was, and the next holder takes it as it is. Every lock in ferry is taken through these, so
//! the poisoning rule is written once.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, whether or not a previous holder panicked.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Reads `l`, whether or not a previous writer panicked.
pub fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes `l`, whether or not a previous writer panicked.
pub fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicked_holder_leaves_the_value_usable() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let mut g = held.lock().expect("first");
            *g = 2;
            panic!("holder dies");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m), 2);
        let l = RwLock::new(5);
        *write(&l) += 1;
        assert_eq!(*read(&l), 6);
    }
}
