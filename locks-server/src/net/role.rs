//! Which side of a node-to-node connection this node is: what the handshake, the TLS session
//! and the session keys each decide by (who speaks and proves first, who dials, which key
//! seals which direction).

/// Which side of the TCP connection this node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// This node connected to the peer; it speaks first and proves first.
    Initiator,
    /// The peer connected to this node.
    Acceptor,
}
