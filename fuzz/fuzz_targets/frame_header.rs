//! Request header peek and parse, response correlation id: never panic, and what they return
//! lies inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mirrorgate::protocol::frame::{parse_request_header, peek_request, response_correlation_id};

fuzz_target!(|data: &[u8]| {
    let peek = peek_request(data);
    assert_eq!(peek.is_ok(), data.len() >= 8);
    if let Ok(info) = parse_request_header(data) {
        let (key, version, correlation) = peek.expect("parse implies peek");
        assert_eq!(info.api_key_raw, key);
        assert_eq!(info.api_key as i16, key);
        assert_eq!(info.api_version, version);
        assert_eq!(info.correlation_id, correlation);
        assert!(info.header_len >= 10 && info.header_len <= data.len());
        if let Some((start, end)) = info.client_id {
            assert!(start == 10 && start <= end && end <= info.header_len);
        }
    }
    match response_correlation_id(data) {
        Ok(id) => assert_eq!(id.to_be_bytes(), data[..4]),
        Err(_) => assert!(data.len() < 4),
    }
});
