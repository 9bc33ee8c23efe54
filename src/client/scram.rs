//! The client side of SCRAM (RFC 5802; SHA-256 and SHA-512 as in RFC 7677) as Kafka uses it:
//! no channel binding, no authorization identity. The server's signature is verified.
//!
//! Owns: the SCRAM messages and the key derivation, and the cache of the last salted password
//! of a credential (PBKDF2 is deliberately slow and a broker answers every connection with the
//! same salt). Pure: no I/O.
//! Must not touch: the Kafka requests that carry the messages (`sasl`), logging of any
//! password, proof or derived key.

use std::sync::Mutex;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};

/// Largest SCRAM iteration count accepted from a server (Kafka allows at most 16384).
const MAX_SCRAM_ITERATIONS: u32 = 100_000;

/// A server message the SCRAM client cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("server-first-message is malformed: {0}")]
    ServerFirst(&'static str),
    #[error("the server's nonce does not extend the client's")]
    Nonce,
    #[error("iteration count {0} is outside 1..={MAX_SCRAM_ITERATIONS}")]
    Iterations(u64),
    #[error("server-final-message is malformed")]
    ServerFinal,
    #[error("the server reported an error: {0}")]
    ServerError(String),
    #[error("the server's signature does not match: it does not know the password")]
    ServerSignature,
}

/// The hash function of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut m = hmac::Hmac::<Sha256>::new_from_slice(key)
                    .expect("HMAC accepts keys of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            ScramHash::Sha512 => {
                let mut m = hmac::Hmac::<Sha512>::new_from_slice(key)
                    .expect("HMAC accepts keys of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, i)`: PBKDF2 with HMAC of this hash.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// The last salted password computed for a credential: PBKDF2 is deliberately slow, and a
/// broker answers every connection with the same salt and iteration count.
#[derive(Default)]
pub struct SaltCache {
    last: Mutex<Option<Salted>>,
}

/// A salted password and what it was computed from.
struct Salted {
    hash: ScramHash,
    salt: Vec<u8>,
    iterations: u32,
    salted: Vec<u8>,
}

impl SaltCache {
    fn get(&self, hash: ScramHash, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = last.as_ref() {
            if s.hash == hash && s.salt == salt && s.iterations == iterations {
                return s.salted.clone();
            }
        }
        let salted = hash.salted_password(password.as_bytes(), salt, iterations);
        *last = Some(Salted {
            hash,
            salt: salt.to_vec(),
            iterations,
            salted: salted.clone(),
        });
        salted
    }
}

/// The client side of one SCRAM exchange, without I/O.
pub struct ScramClient {
    hash: ScramHash,
    password: String,
    client_first_bare: String,
    nonce: String,
    /// Set by [`Self::server_first`]: the signature the server must prove.
    expected_server_signature: Option<Vec<u8>>,
}

/// `saslname` of RFC 5802: `=` and `,` escaped as `=3D` and `=2C`.
fn escape_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

impl ScramClient {
    /// A client with a fresh random nonce.
    pub fn new(hash: ScramHash, username: &str, password: &str) -> ScramClient {
        let mut raw = [0u8; 24];
        if getrandom::fill(&mut raw).is_err() {
            // No OS randomness: fall back to a v4 UUID (itself random) rather than a fixed nonce.
            raw[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        }
        Self::with_nonce(hash, username, password, &B64.encode(raw))
    }

    /// A client with a given nonce (printable, without `,`): for tests against known vectors.
    pub fn with_nonce(hash: ScramHash, username: &str, password: &str, nonce: &str) -> ScramClient {
        ScramClient {
            hash,
            password: password.to_string(),
            client_first_bare: format!("n={},r={nonce}", escape_saslname(username)),
            nonce: nonce.to_string(),
            expected_server_signature: None,
        }
    }

    /// client-first-message: no channel binding, no authorization identity.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// Take the server-first-message and return the client-final-message.
    pub fn server_first(&mut self, msg: &str, salts: &SaltCache) -> Result<String, ScramError> {
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for (i, attr) in msg.split(',').enumerate() {
            let Some((k, v)) = attr.split_once('=') else {
                return Err(ScramError::ServerFirst("an attribute is not `k=value`"));
            };
            match k {
                "m" if i == 0 => {
                    return Err(ScramError::ServerFirst("a mandatory extension is required"))
                }
                "r" => nonce = Some(v),
                "s" => {
                    salt = Some(
                        B64.decode(v)
                            .map_err(|_| ScramError::ServerFirst("the salt is not base64"))?,
                    )
                }
                "i" => {
                    let n: u64 = v.parse().map_err(|_| {
                        ScramError::ServerFirst("the iteration count is not a number")
                    })?;
                    iterations = Some(n)
                }
                _ => {}
            }
        }
        let nonce = nonce.ok_or(ScramError::ServerFirst("no nonce"))?;
        let salt = salt.ok_or(ScramError::ServerFirst("no salt"))?;
        let iterations = iterations.ok_or(ScramError::ServerFirst("no iteration count"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        let iterations = match u32::try_from(iterations) {
            Ok(n) if (1..=MAX_SCRAM_ITERATIONS).contains(&n) => n,
            _ => return Err(ScramError::Iterations(iterations)),
        };
        let h = self.hash;
        let salted = salts.get(h, &self.password, &salt, iterations);
        let client_key = h.hmac(&salted, b"Client Key");
        let stored_key = h.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{msg},{without_proof}", self.client_first_bare);
        let client_signature = h.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = h.hmac(&salted, b"Server Key");
        self.expected_server_signature = Some(h.hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Check the server-final-message: the server proves it knows the salted password.
    pub fn server_final(&self, msg: &str) -> Result<(), ScramError> {
        if let Some(e) = msg.strip_prefix("e=") {
            return Err(ScramError::ServerError(e.chars().take(200).collect()));
        }
        let v = msg
            .split(',')
            .find_map(|a| a.strip_prefix("v="))
            .ok_or(ScramError::ServerFinal)?;
        let got = B64.decode(v).map_err(|_| ScramError::ServerFinal)?;
        let want = self
            .expected_server_signature
            .as_ref()
            .ok_or(ScramError::ServerFinal)?;
        // Compared without an early exit.
        let diff = got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if got.len() != want.len() || diff != 0 {
            return Err(ScramError::ServerSignature);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 7677 section 3.
    const NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_client() -> ScramClient {
        ScramClient::with_nonce(ScramHash::Sha256, "user", "pencil", NONCE)
    }

    #[test]
    fn scram_sha_256_matches_the_rfc_7677_test_vector() {
        let mut c = rfc_client();
        assert_eq!(c.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let client_final = c.server_first(SERVER_FIRST, &SaltCache::default()).unwrap();
        assert_eq!(client_final, CLIENT_FINAL);
        c.server_final(SERVER_FINAL).unwrap();
    }

    #[test]
    fn scram_rejects_a_wrong_server_signature() {
        let mut c = rfc_client();
        c.server_first(SERVER_FIRST, &SaltCache::default()).unwrap();
        let wrong = "v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
        assert_eq!(c.server_final(wrong), Err(ScramError::ServerSignature));
        assert_eq!(c.server_final("v=AAAA"), Err(ScramError::ServerSignature));
    }

    #[test]
    fn scram_rejects_a_server_nonce_that_does_not_extend_the_clients() {
        let mut c = rfc_client();
        let other = SERVER_FIRST.replace("rOprNG", "xOprNG");
        assert_eq!(
            c.server_first(&other, &SaltCache::default()),
            Err(ScramError::Nonce)
        );
        let same = format!("r={NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
        assert_eq!(
            c.server_first(&same, &SaltCache::default()),
            Err(ScramError::Nonce)
        );
    }

    #[test]
    fn scram_reports_a_server_error_in_the_final_message() {
        let c = rfc_client();
        assert_eq!(
            c.server_final("e=invalid-proof"),
            Err(ScramError::ServerError("invalid-proof".into()))
        );
    }

    #[test]
    fn scram_refuses_malformed_or_excessive_server_first_messages() {
        let salts = SaltCache::default();
        for bad in [
            "",
            "garbage",
            "r=rOprNGfwEbeRWgbNEkqOx,s=!!!,i=4096",
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==",
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=-1",
            "m=ext,r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        ] {
            assert!(
                rfc_client().server_first(bad, &salts).is_err(),
                "accepted {bad:?}"
            );
        }
        assert_eq!(
            rfc_client().server_first(
                "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999999",
                &salts
            ),
            Err(ScramError::Iterations(99_999_999_999))
        );
    }

    #[test]
    fn scram_escapes_comma_and_equals_in_the_username() {
        let c = ScramClient::with_nonce(ScramHash::Sha512, "a,b=c", "p", "n0nce");
        assert_eq!(c.client_first(), "n,,n=a=2Cb=3Dc,r=n0nce");
    }

    #[test]
    fn scram_sha_512_proof_has_the_hash_length() {
        let mut c = ScramClient::with_nonce(ScramHash::Sha512, "user", "pencil", NONCE);
        let out = c.server_first(SERVER_FIRST, &SaltCache::default()).unwrap();
        let proof = out.rsplit_once(",p=").unwrap().1;
        assert_eq!(B64.decode(proof).unwrap().len(), 64);
    }

    #[test]
    fn scram_nonces_are_fresh() {
        let a = ScramClient::new(ScramHash::Sha256, "u", "p").client_first();
        let b = ScramClient::new(ScramHash::Sha256, "u", "p").client_first();
        assert_ne!(a, b);
        assert!(!a[3..].contains(",r=,"));
    }
}
