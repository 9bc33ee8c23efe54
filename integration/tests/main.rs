//! integration tests
mod harness;
mod rig_tests;
mod compose;
mod gw;
mod proxy_bad_input;
mod proxy_clients;
