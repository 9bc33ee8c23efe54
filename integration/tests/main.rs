//! integration tests
mod harness;
mod rig_tests;
mod compose;
