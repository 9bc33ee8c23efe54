//! State store.
