//! integration tests
mod admin_api;
mod cli;
mod compose;
mod failover;
mod gw;
mod harness;
mod proxy_bad_input;
mod proxy_clients;
mod psm_differential;
mod rig_tests;
mod observability;
mod agent;
