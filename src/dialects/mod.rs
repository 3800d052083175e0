//! One adapter per plugin API ("dialect"), mapping its Python surface onto
//! the Rust registry and hook bus. Flowly is the first.

pub mod flowly;
