//! Frames bound to their handshake: after the cookie handshake both sides derive the session's
//! key, and every frame after it carries a tag that only a holder of that key can make.
//!
//! ```text
//!   key = HMAC-SHA256(cookie, CONTEXT || version || name_i || name_a || nonce_i || nonce_a)
//!   tag = HMAC-SHA256(key, direction || sequence || frame)[..TAG_LEN]
//! ```
//!
//! `i` is the initiator, `a` the acceptor (names length-prefixed, as in the proofs); the
//! direction is the sender's role, the sequence counts the frames of that direction from 0.
//! A frame whose tag does not verify (checked in constant time) ends the connection.
//!
//! Why: the proofs bind names and nonces but not the TCP connection, so a third party that can
//! take one dial of a node (by binding a dead peer's port, say) could relay the node's `Hello`
//! and `Proof` to another node and then hold an authenticated link to it in the first node's
//! name. The key needs the cookie, so the relay can neither make a frame the receiver accepts,
//! nor replay, reorder, drop or reflect one (the sequence and direction are in the tag); it can
//! only pass the frames on as they are, or cut the connection. Under TLS the session already
//! gives this; the tags are made there too (one path for every link).

use crate::net::Cookie;
use crate::net::Role;
use crate::net::frame::Nonce;
use bytes::{Bytes, BytesMut};
use hmac::{Hmac, KeyInit, Mac};
use locks_core::NodeId;
use locks_core::proto::PROTOCOL_VERSION;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Domain separation: no proof of the handshake is computed over the same input.
const CONTEXT: &[u8] = b"locks/node-session/v1";

/// The bytes of tag each frame after the handshake ends with.
pub const TAG_LEN: usize = 16;

/// The key of one connection, derived at the end of its handshake.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKey([u8; 32]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

impl SessionKey {
    /// The key of a handshake between `initiator` and `acceptor` with these nonces.
    pub fn derive(
        cookie: &Cookie,
        initiator: (&NodeId, &Nonce),
        acceptor: (&NodeId, &Nonce),
    ) -> SessionKey {
        let mut mac = keyed(cookie.secret());
        mac.update(CONTEXT);
        mac.update(&PROTOCOL_VERSION.to_be_bytes());
        for name in [initiator.0, acceptor.0] {
            let name = name.as_str().as_bytes();
            mac.update(&(name.len() as u32).to_be_bytes());
            mac.update(name);
        }
        mac.update(initiator.1);
        mac.update(acceptor.1);
        SessionKey(mac.finalize().into_bytes().into())
    }

    /// What tags the frames a side of `role` sends.
    pub fn sealer(&self, role: Role) -> Tagger {
        Tagger::new(self, role)
    }

    /// What checks the frames the peer of a side of `role` sends.
    pub fn opener(&self, role: Role) -> Tagger {
        Tagger::new(
            self,
            match role {
                Role::Initiator => Role::Acceptor,
                Role::Acceptor => Role::Initiator,
            },
        )
    }
}

fn keyed(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length.
    <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length")
}

/// The tags of one direction of a connection: frames in order, from sequence 0.
#[derive(Clone)]
pub struct Tagger {
    mac: HmacSha256,
    direction: u8,
    seq: u64,
}

impl std::fmt::Debug for Tagger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tagger")
            .field("direction", &self.direction)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Tagger {
    fn new(key: &SessionKey, sender: Role) -> Tagger {
        Tagger {
            mac: keyed(&key.0),
            direction: match sender {
                Role::Initiator => 0,
                Role::Acceptor => 1,
            },
            seq: 0,
        }
    }

    fn tag(&mut self, frame: &[u8]) -> [u8; TAG_LEN] {
        let mut mac = self.mac.clone();
        mac.update(&[self.direction]);
        mac.update(&self.seq.to_be_bytes());
        mac.update(frame);
        self.seq += 1;
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        tag
    }

    /// `frame` with the next tag of this direction after it.
    pub fn seal(&mut self, frame: Bytes) -> Bytes {
        let tag = self.tag(&frame);
        let mut out = frame
            .try_into_mut()
            .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
        out.extend_from_slice(&tag);
        out.freeze()
    }

    /// The frame inside `sealed`, if its tag is the next one of this direction.
    pub fn open<'a>(&mut self, sealed: &'a [u8]) -> Option<&'a [u8]> {
        let split = sealed.len().checked_sub(TAG_LEN)?;
        let (frame, tag) = sealed.split_at(split);
        let expected = self.tag(frame);
        // Constant time: a tag is not learnt byte by byte.
        let diff = expected
            .iter()
            .zip(tag)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        (diff == 0).then_some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cookie: &str, nonce: u8) -> SessionKey {
        let (i, a) = (NodeId::new("i").unwrap(), NodeId::new("a").unwrap());
        SessionKey::derive(&Cookie::from(cookie), (&i, &[nonce; 32]), (&a, &[2; 32]))
    }

    #[test]
    fn only_the_next_frame_of_the_direction_under_the_same_key_opens() {
        let k = key("c", 1);
        let mut send = k.sealer(Role::Initiator);
        let mut recv = k.opener(Role::Acceptor);
        let one = send.seal(Bytes::from_static(b"one"));
        let two = send.seal(Bytes::from_static(b"two"));
        // Out of order, reflected, under another key or altered: refused.
        assert!(recv.clone().open(&two).is_none());
        assert!(k.opener(Role::Initiator).open(&one).is_none());
        assert!(key("other", 1).opener(Role::Acceptor).open(&one).is_none());
        assert!(key("c", 9).opener(Role::Acceptor).open(&one).is_none());
        let mut bad = one.to_vec();
        bad[0] ^= 1;
        assert!(recv.clone().open(&bad).is_none());
        assert!(recv.clone().open(b"short").is_none());
        // In order: both open, and a replay of the first does not.
        assert_eq!(recv.open(&one), Some(&b"one"[..]));
        assert_eq!(recv.open(&two), Some(&b"two"[..]));
        assert!(recv.open(&one).is_none());
        assert_eq!(format!("{k:?}"), "SessionKey(..)");
    }
}
