//! State a host keeps for its dialects and its agent: a typed map, one
//! value per type, owned by the host and dropped with it.
//!
//! A dialect that needs something per host (its plugins' CLI commands, the
//! entry points it found, the messages its plugins injected) keeps it here
//! instead of in a `static`, so two hosts in one process (the wheel) share
//! nothing but the interpreter.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A host's typed extension map (keyed by [`TypeId`]).
#[derive(Default)]
pub struct Extensions {
    map: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Extensions")
    }
}

impl Extensions {
    /// The host's `T`, made by `init` the first time it is asked for.
    pub fn get_or_init<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(init()));
        Arc::clone(entry)
            .downcast::<T>()
            .expect("an extension is stored under its own TypeId")
    }

    /// The host's `T`, its default the first time.
    pub fn get<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        self.get_or_init(T::default)
    }

    /// The host's `T`, if something made one.
    pub fn peek<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&TypeId::of::<T>()).map(|v| {
            Arc::clone(v)
                .downcast::<T>()
                .expect("stored under its TypeId")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Count(std::sync::atomic::AtomicU32);

    #[test]
    fn one_value_per_type_and_per_map() {
        let (a, b) = (Extensions::default(), Extensions::default());
        a.get::<Count>()
            .0
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            a.get::<Count>().0.load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        assert!(b.peek::<Count>().is_none());
        assert_eq!(
            b.get::<Count>().0.load(std::sync::atomic::Ordering::SeqCst),
            0
        );
    }
}
