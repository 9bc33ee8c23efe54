//! integration tests
mod admin_api;
mod agent;
mod cli;
mod compose;
mod failover;
mod faults;
mod gw;
mod harness;
mod mm2;
mod observability;
mod proxy_bad_input;
mod proxy_clients;
mod psm_differential;
mod read_only_apis;
mod rig_tests;
mod sasl;
mod tls;
