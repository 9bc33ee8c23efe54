//! Which API versions the gateway can handle, and capping the broker's ApiVersions answer to
//! them.
//!
//! The gateway forwards most requests as raw bytes, so for those it only needs to know the api
//! key (unknown keys are removed from ApiVersions so that clients never send them). For the APIs
//! whose responses it decodes or rewrites, it caps the advertised range to what the
//! `kafka-protocol` crate can parse; the same for the admin, transaction and group requests whose
//! entries read-only enforcement (client listener) or the fencing of failed-over topics (mirror
//! listener) may refuse ([`super::admin_refusal`]). One answer serves both listeners.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiKey;

/// APIs whose responses the gateway decodes (to rewrite addresses or read results).
pub const DECODED: &[ApiKey] = &[
    ApiKey::ApiVersions,
    ApiKey::Metadata,
    ApiKey::FindCoordinator,
    ApiKey::DescribeCluster,
    ApiKey::Produce,
    ApiKey::Fetch,
    // Barriers are hidden in ShareFetch answers, and both carry broker addresses
    // (`node_endpoints`): only the versions kafka-protocol reads are offered (review F7).
    ApiKey::ShareFetch,
    ApiKey::ShareAcknowledge,
];

/// Whether the gateway decodes responses of `key`.
pub fn is_decoded(key: ApiKey) -> bool {
    DECODED.contains(&key)
}

/// The versions of `key` the gateway accepts from clients, or `None` when it forwards any
/// version the broker accepts.
pub fn gateway_range(key: ApiKey) -> Option<(i16, i16)> {
    match key {
        // SaslHandshake v0 switches the connection to raw SASL tokens without Kafka framing,
        // which a frame-aware gateway cannot follow. v1 keeps tokens in SaslAuthenticate.
        ApiKey::SaslHandshake => Some((1, key.valid_versions().max)),
        // Any ApiVersions version goes to the broker: one newer than the broker knows is
        // answered with UNSUPPORTED_VERSION in a v0 body (KIP-511), which the gateway decodes.
        ApiKey::ApiVersions => None,
        // PID screening decodes InitProducerId requests; the crate decodes them up to v5.
        ApiKey::InitProducerId => Some((key.valid_versions().min, 5)),
        // Read-only enforcement decodes these admin / transaction requests on the client
        // listener, the fencing of failed-over topics these and the group-offset requests on
        // the mirror listener: only versions the crate can read are offered.
        k if super::admin_refusal::is_guarded(k)
            || super::admin_refusal::is_guarded_on_mirror(k) =>
        {
            super::admin_refusal::readable_versions(k)
        }
        k if is_decoded(k) => {
            let r = k.valid_versions();
            Some((r.min, r.max))
        }
        _ => None,
    }
}

/// Whether a request of `key` at `version` can go through the gateway.
pub fn accepts(key: ApiKey, version: i16) -> bool {
    match gateway_range(key) {
        Some((min, max)) => version >= min && version <= max,
        None => true,
    }
}

/// Cap a broker's ApiVersions entries in place to what the gateway supports. Unknown api keys
/// and empty ranges are removed. Returns how many entries changed.
pub fn cap_api_versions(entries: &mut Vec<ApiVersion>) -> usize {
    let mut changed = 0;
    entries.retain_mut(|e| {
        let Ok(key) = ApiKey::try_from(e.api_key) else {
            changed += 1;
            return false;
        };
        let advertised = match key {
            // Accepted at any version, but only versions the gateway can decode are offered.
            ApiKey::ApiVersions => Some((key.valid_versions().min, key.valid_versions().max)),
            k => gateway_range(k),
        };
        if let Some((min, max)) = advertised {
            let (old_min, old_max) = (e.min_version, e.max_version);
            e.min_version = e.min_version.max(min);
            e.max_version = e.max_version.min(max);
            if (old_min, old_max) != (e.min_version, e.max_version) {
                changed += 1;
            }
        }
        if e.min_version > e.max_version {
            // Counted above when the range was narrowed to nothing.
            return false;
        }
        true
    });
    changed
}

/// The last version of each API that names its topics where later versions carry topic ids
/// instead (Produce v13, Fetch v13: KIP-516).
pub const LAST_NAMING_TOPICS: &[(ApiKey, i16)] = &[(ApiKey::Produce, 12), (ApiKey::Fetch, 12)];

/// Cap ApiVersions entries in place to [`LAST_NAMING_TOPICS`]: a forward listener's virtual
/// cluster stands for two clusters that give the same topic different ids, so its clients get
/// only versions that name topics, and a request means the same topic before and after a
/// switch (with ids, every partition's first request after it would be refused with
/// `UNKNOWN_TOPIC_ID` and a producer's pipelined batches behind it out of sequence). Returns
/// how many entries changed.
pub fn cap_to_named_topics(entries: &mut [ApiVersion]) -> usize {
    let mut changed = 0;
    for e in entries.iter_mut() {
        let last = LAST_NAMING_TOPICS
            .iter()
            .find(|(k, _)| *k as i16 == e.api_key)
            .map(|(_, v)| *v);
        if let Some(last) = last.filter(|v| e.max_version > *v && e.min_version <= *v) {
            e.max_version = last;
            changed += 1;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_cluster_offers_produce_and_fetch_only_in_versions_that_name_topics() {
        let mut v = vec![entry(0, 3, 13), entry(1, 4, 18), entry(3, 0, 13)];
        assert_eq!(cap_to_named_topics(&mut v), 2);
        assert_eq!((v[0].min_version, v[0].max_version), (3, 12));
        assert_eq!((v[1].min_version, v[1].max_version), (4, 12));
        assert_eq!(
            v[2].max_version, 13,
            "Metadata names its topics at every version"
        );
        assert_eq!(cap_to_named_topics(&mut v), 0, "already capped");
    }

    fn entry(key: i16, min: i16, max: i16) -> ApiVersion {
        ApiVersion::default()
            .with_api_key(key)
            .with_min_version(min)
            .with_max_version(max)
    }

    #[test]
    fn caps_decoded_apis_to_the_crate_range() {
        let mut v = vec![entry(3, 0, 99), entry(0, 3, 99)];
        cap_api_versions(&mut v);
        assert_eq!(v[0].max_version, ApiKey::Metadata.valid_versions().max);
        assert_eq!(v[1].max_version, ApiKey::Produce.valid_versions().max);
    }

    #[test]
    fn share_fetch_and_share_acknowledge_are_capped_to_what_the_gateway_reads() {
        // A broker offering v0..v3: only what kafka-protocol decodes remains, so every ShareFetch
        // the gateway forwards can be filtered and every answer's node endpoints rewritten.
        for key in [ApiKey::ShareFetch, ApiKey::ShareAcknowledge] {
            let r = key.valid_versions();
            let mut v = vec![entry(key as i16, 0, 3)];
            cap_api_versions(&mut v);
            assert_eq!(
                (v[0].min_version, v[0].max_version),
                (r.min, r.max),
                "{key:?}"
            );
            assert!(accepts(key, r.max) && !accepts(key, r.max + 1), "{key:?}");
            assert!(
                crate::protocol::rewrite::needs_rewrite(key, r.max),
                "{key:?}"
            );
        }
    }

    #[test]
    fn removes_unknown_api_keys() {
        let mut v = vec![entry(3, 0, 12), entry(30000, 0, 1)];
        assert_eq!(cap_api_versions(&mut v), 1);
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn leaves_raw_forwarded_apis_alone() {
        let mut v = vec![entry(ApiKey::JoinGroup as i16, 0, 42)];
        assert_eq!(cap_api_versions(&mut v), 0);
        assert_eq!(v[0].max_version, 42);
    }

    #[test]
    fn any_api_versions_version_is_forwarded() {
        assert!(accepts(ApiKey::ApiVersions, 77));
    }

    #[test]
    fn guarded_admin_apis_are_capped_to_what_can_be_read() {
        use crate::protocol::admin_refusal::{GROUP_OFFSETS, GUARDED};
        for api in GUARDED.iter().chain(GROUP_OFFSETS) {
            let (min, max) = crate::protocol::admin_refusal::readable_versions(*api).unwrap();
            let mut v = vec![entry(*api as i16, 0, 99)];
            cap_api_versions(&mut v);
            assert_eq!((v[0].min_version, v[0].max_version), (min, max), "{api:?}");
            assert!(!accepts(*api, max + 1), "{api:?}");
        }
    }

    #[test]
    fn sasl_handshake_v0_is_not_offered() {
        let mut v = vec![entry(ApiKey::SaslHandshake as i16, 0, 1)];
        cap_api_versions(&mut v);
        assert_eq!(v[0].min_version, 1);
        assert!(!accepts(ApiKey::SaslHandshake, 0));
    }
}
