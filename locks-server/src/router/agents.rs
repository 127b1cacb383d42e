//! The local agents' mailboxes, and which transactions of this node are live without one.
//!
//! Most transactions never need a mailbox: their locks are granted at once on the fast path,
//! and nobody sends them anything. Registering one at `begin` and forgetting it at `end` was
//! about a tenth of an uncontended transaction (a shard's mutex and a hash map insertion and
//! removal, twice). So a transaction begun on a thread that keeps a block of serials
//! (`crate::agent_ids`) is only marked live in its block's word ([`Block`]), a line that the
//! thread itself writes, and gets a mailbox when the first message for it comes.
//!
//! Each serial of a block has two bits in the block's word:
//!
//! | state | meaning |
//! | --- | --- |
//! | unused | not handed out yet |
//! | idle | a live transaction with no mailbox |
//! | boxed | a mailbox was registered for it (the agent is gone if the mailbox is not there) |
//! | gone | ended, or handed out to an agent that registers its mailbox itself |
//!
//! Invariants:
//! - a serial moves only forward: unused → idle → boxed → gone, unused → gone, idle → gone;
//! - idle → boxed happens only under the lock of the serial's shard, together with the
//!   insertion of its mailbox, and only the transaction's end moves it to gone; an end that
//!   finds it boxed removes the mailbox under the same lock. So a message that finds the
//!   serial idle or boxed is kept for the transaction, and a message that comes after its end
//!   finds neither a mailbox nor an idle serial and fails as sent to an agent that is gone;
//!   no mailbox outlives its transaction;
//! - a block is in its shard's map from before its first serial is handed out until every
//!   serial is gone; the operation that makes the last one gone removes it.
//!
//! A message to an agent that has a mailbox never looks at the block: agents that register
//! their mailbox themselves (the leader's members, a transaction begun on a thread without
//! thread-locals) behave as before.

use super::Deliver;
use actix::Recipient;
use locks_core::AgentId;
use locks_core::proto::AgentMessage;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The router's maps are looked up once or twice per message, on keys that come from the node
/// itself (no peer chooses them), so a fast hash without DoS resistance fits.
type FastMap<K, V> = HashMap<K, V, ahash::RandomState>;

/// How many serials a thread takes from its node at once: two bits each in a block's word.
pub(crate) const SERIAL_BLOCK: u64 = 32;

/// How many shards the agents' mailboxes and blocks are kept in.
const AGENT_SHARDS: usize = 16;

const IDLE: u64 = 0b01;
const BOXED: u64 = 0b11;
const GONE: u64 = 0b10;
const STATE: u64 = 0b11;
/// Every serial of a block gone.
const ALL_GONE: u64 = 0xAAAA_AAAA_AAAA_AAAA;

/// The block a serial belongs to: serials are handed out from 1, in blocks of
/// [`SERIAL_BLOCK`].
pub(crate) fn block_of(serial: u64) -> u64 {
    serial.saturating_sub(1) / SERIAL_BLOCK
}

/// The first serial of block `block`.
pub(crate) fn first_serial(block: u64) -> u64 {
    block * SERIAL_BLOCK + 1
}

/// Which transactions of one block of serials are live (see the module documentation).
#[derive(Debug)]
pub(crate) struct Block {
    incarnation: u64,
    index: u64,
    word: AtomicU64,
}

/// How an end changed a serial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ended {
    /// The serial was boxed: its mailbox must be removed.
    boxed: bool,
    /// This made the last serial of the block gone: the block must be removed.
    last: bool,
}

impl Block {
    fn shift(&self, serial: u64) -> Option<u32> {
        let first = first_serial(self.index);
        (serial >= first && serial - first < SERIAL_BLOCK).then(|| ((serial - first) * 2) as u32)
    }

    fn state(&self, serial: u64) -> Option<u64> {
        let shift = self.shift(serial)?;
        Some((self.word.load(Ordering::Acquire) >> shift) & STATE)
    }

    /// Marks an unused serial idle: its transaction begins.
    fn begin(&self, serial: u64) {
        if let Some(shift) = self.shift(serial) {
            self.word.fetch_or(IDLE << shift, Ordering::AcqRel);
        }
    }

    /// Marks unused serials gone (handed out to an agent with a mailbox of its own, or never
    /// to be handed out). Whether that made the last serial of the block gone.
    fn forgo(&self, serials: std::ops::Range<u64>) -> bool {
        let mask = serials
            .filter_map(|s| self.shift(s))
            .fold(0, |mask, shift| mask | (GONE << shift));
        mask != 0 && self.word.fetch_or(mask, Ordering::AcqRel) | mask == ALL_GONE
    }

    /// Moves an idle serial to boxed; false if it is not idle.
    fn open_mailbox(&self, serial: u64) -> bool {
        let Some(shift) = self.shift(serial) else {
            return false;
        };
        self.word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                ((w >> shift) & STATE == IDLE).then_some(w | (BOXED << shift))
            })
            .is_ok()
    }

    /// Moves an idle or boxed serial to gone: its transaction ends.
    fn end(&self, serial: u64) -> Ended {
        let Some(shift) = self.shift(serial) else {
            return Ended {
                boxed: false,
                last: false,
            };
        };
        let was = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                matches!((w >> shift) & STATE, IDLE | BOXED)
                    .then_some((w & !(STATE << shift)) | (GONE << shift))
            });
        match was {
            Ok(w) => Ended {
                boxed: (w >> shift) & STATE == BOXED,
                last: (w & !(STATE << shift)) | (GONE << shift) == ALL_GONE,
            },
            Err(_) => Ended {
                boxed: false,
                last: false,
            },
        }
    }
}

/// A live transaction of this node that may have no mailbox: what its end needs to tell the
/// router ([`super::Router::end_transaction`]).
#[derive(Debug)]
pub struct Presence {
    pub(crate) id: AgentId,
    /// The block it is live in; `None` when a mailbox was registered for it at `begin`.
    pub(crate) block: Option<Arc<Block>>,
}

impl Presence {
    /// The transaction's agent id.
    pub fn id(&self) -> &AgentId {
        &self.id
    }
}

/// Where messages to a local agent go.
pub(crate) enum Mailbox {
    /// The agent's actor.
    Running(Recipient<Deliver>),
    /// A transaction with no actor yet (its locks so far were granted by the node's fast path):
    /// messages for it are kept, in order, until an actor takes them over
    /// ([`super::Router::attach_agent`]). A deadlock probe is refuted at once instead, while
    /// the transaction waits for nothing (`waits` is false): such an agent is in no cycle. From
    /// the moment the table queues one of its requests (`Router::idle_agent_waits`, called
    /// before anybody is told of that wait), probes are kept like everything else, for the
    /// actor.
    Idle {
        kept: Vec<AgentMessage>,
        waits: bool,
    },
}

impl Mailbox {
    fn idle() -> Mailbox {
        Mailbox::Idle {
            kept: Vec::new(),
            waits: false,
        }
    }
}

/// One shard: the mailboxes and the blocks of its serials.
#[derive(Default)]
pub(crate) struct Shard {
    pub(crate) mailboxes: FastMap<AgentId, Mailbox>,
    blocks: FastMap<u64, Arc<Block>>,
}

impl Shard {
    /// The mailbox of `agent`, made now if it is a live transaction without one (`None` if it
    /// has none and is not live).
    pub(crate) fn mailbox(&mut self, agent: &AgentId) -> Option<&mut Mailbox> {
        if !self.mailboxes.contains_key(agent) {
            let block = self.blocks.get(&block_of(agent.serial()))?;
            if block.incarnation != agent.incarnation() || !block.open_mailbox(agent.serial()) {
                return None;
            }
            self.mailboxes.insert(agent.clone(), Mailbox::idle());
        }
        self.mailboxes.get_mut(agent)
    }

    /// Whether `agent` is a live transaction without a mailbox.
    fn idle_in_block(&self, agent: &AgentId) -> bool {
        self.blocks.get(&block_of(agent.serial())).is_some_and(|b| {
            b.incarnation == agent.incarnation() && b.state(agent.serial()) == Some(IDLE)
        })
    }
}

/// One shard of the agents' mailboxes, on a cache line of its own: threads running
/// transactions side by side would otherwise pass one mutex's line (and its neighbours') back
/// and forth.
#[repr(align(128))]
#[derive(Default)]
struct AgentShard(Mutex<Shard>);

/// The local agents' mailboxes and blocks, sharded by block of serials.
#[derive(Default)]
pub(crate) struct Agents {
    shards: Box<[AgentShard; AGENT_SHARDS]>,
}

impl std::fmt::Debug for Agents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agents").finish_non_exhaustive()
    }
}

impl Agents {
    /// The shard of the agents of block `block`. A thread takes its serials in blocks
    /// (`crate::agent_ids`): the agents of one thread's block share a shard, those of two
    /// threads' blocks (taken one after the other) do not.
    fn shard_of_block(&self, block: u64) -> MutexGuard<'_, Shard> {
        self.shards[(block % AGENT_SHARDS as u64) as usize]
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard of `agent`.
    pub(crate) fn shard(&self, agent: &AgentId) -> MutexGuard<'_, Shard> {
        self.shard_of_block(block_of(agent.serial()))
    }

    /// Every shard, locked one after the other.
    pub(crate) fn shards(&self) -> impl Iterator<Item = MutexGuard<'_, Shard>> {
        self.shards
            .iter()
            .map(|s| s.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A new block of serials of `incarnation`, registered before any serial of it is handed
    /// out.
    pub(crate) fn new_block(&self, incarnation: u64, index: u64) -> Arc<Block> {
        let block = Arc::new(Block {
            incarnation,
            index,
            word: AtomicU64::new(0),
        });
        self.shard_of_block(index)
            .blocks
            .insert(index, block.clone());
        block
    }

    fn forget_block(&self, block: &Block) {
        let mut shard = self.shard_of_block(block.index);
        if shard
            .blocks
            .get(&block.index)
            .is_some_and(|b| std::ptr::eq(&**b, block))
        {
            shard.blocks.remove(&block.index);
        }
    }

    /// Registers the mailbox of a transaction that has no actor yet (one begun without a
    /// block: see [`Presence`]).
    pub(crate) fn register_idle(&self, agent: AgentId) {
        self.shard(&agent).mailboxes.insert(agent, Mailbox::idle());
    }

    /// A transaction with serial `serial` of `block` begins, live without a mailbox.
    pub(crate) fn begin(&self, block: &Arc<Block>, serial: u64) {
        block.begin(serial);
    }

    /// Serials of `block` that will never be a transaction without a mailbox are gone.
    pub(crate) fn forgo(&self, block: &Block, serials: std::ops::Range<u64>) {
        if block.forgo(serials) {
            self.forget_block(block);
        }
    }

    /// The transaction of `presence` ended: it is not live any more, and a mailbox made for it
    /// is removed.
    pub(crate) fn end(&self, presence: &Presence) {
        match &presence.block {
            Some(block) => {
                let ended = block.end(presence.id.serial());
                if ended.boxed {
                    self.shard(&presence.id).mailboxes.remove(&presence.id);
                }
                if ended.last {
                    self.forget_block(block);
                }
            }
            None => {
                self.shard(&presence.id).mailboxes.remove(&presence.id);
            }
        }
    }

    /// Whether no mailbox and no block is kept.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.shards()
            .all(|shard| shard.mailboxes.is_empty() && shard.blocks.is_empty())
    }

    /// Whether `agent` has a mailbox or is a live transaction without one.
    pub(crate) fn has(&self, agent: &AgentId) -> bool {
        let shard = self.shard(agent);
        shard.mailboxes.contains_key(agent) || shard.idle_in_block(agent)
    }

    /// How many agents have a mailbox or are live without one.
    pub(crate) fn count(&self) -> usize {
        self.shards()
            .map(|shard| {
                let idle: u32 = shard
                    .blocks
                    .values()
                    .map(|b| {
                        let w = b.word.load(Ordering::Acquire);
                        // Idle serials: low bit set, high bit clear.
                        (w & !(w >> 1) & 0x5555_5555_5555_5555).count_ones()
                    })
                    .sum();
                shard.mailboxes.len() + idle as usize
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::NodeId;

    fn id(serial: u64) -> AgentId {
        AgentId::new(NodeId::new("n").unwrap(), 7, serial)
    }

    #[test]
    fn blocks_start_at_serial_one() {
        assert_eq!((block_of(1), block_of(32), block_of(33)), (0, 0, 1));
        assert_eq!((first_serial(0), first_serial(1)), (1, 33));
    }

    #[test]
    fn a_serial_moves_only_forward() {
        let agents = Agents::default();
        let block = agents.new_block(7, 0);
        agents.begin(&block, 1);
        assert_eq!(block.state(1), Some(IDLE));
        assert!(agents.has(&id(1)));
        assert!(!agents.has(&id(2)), "never handed out");
        assert!(block.open_mailbox(1));
        assert!(!block.open_mailbox(1), "boxed already");
        assert_eq!(
            block.end(1),
            Ended {
                boxed: true,
                last: false
            }
        );
        assert!(!block.open_mailbox(1), "gone");
        assert!(!block.end(1).boxed, "ending twice changes nothing");
        assert_eq!(block.state(1), Some(GONE));
    }

    #[test]
    fn a_message_to_an_idle_transaction_makes_its_mailbox_and_none_after_its_end() {
        let agents = Agents::default();
        let block = agents.new_block(7, 0);
        agents.begin(&block, 2);
        let presence = Presence {
            id: id(2),
            block: Some(block.clone()),
        };
        assert!(agents.shard(&id(2)).mailbox(&id(2)).is_some());
        assert!(agents.shard(&id(2)).mailboxes.contains_key(&id(2)));
        agents.end(&presence);
        assert!(!agents.shard(&id(2)).mailboxes.contains_key(&id(2)));
        assert!(agents.shard(&id(2)).mailbox(&id(2)).is_none());
        assert!(!agents.has(&id(2)));
        // Another incarnation's agent with the same serial is not this one.
        agents.begin(&block, 3);
        let other = AgentId::new(NodeId::new("n").unwrap(), 8, 3);
        assert!(agents.shard(&other).mailbox(&other).is_none());
    }

    #[test]
    fn a_block_is_forgotten_when_its_last_serial_is_gone() {
        let agents = Agents::default();
        let block = agents.new_block(7, 1);
        let first = first_serial(1);
        let presences: Vec<Presence> = (first..first + 3)
            .map(|s| {
                agents.begin(&block, s);
                Presence {
                    id: id(s),
                    block: Some(block.clone()),
                }
            })
            .collect();
        agents.forgo(&block, first + 3..first + SERIAL_BLOCK);
        assert_eq!(agents.count(), 3);
        for p in &presences[..2] {
            agents.end(p);
        }
        assert!(agents.shard_of_block(1).blocks.contains_key(&1));
        agents.end(&presences[2]);
        assert!(!agents.shard_of_block(1).blocks.contains_key(&1));
        assert_eq!(agents.count(), 0);
    }

    /// A thread ends transactions while another sends them messages: whatever the
    /// interleaving, no mailbox and no block is left once every transaction has ended.
    #[test]
    fn ends_and_messages_side_by_side_leave_nothing_behind() {
        let agents = Arc::new(Agents::default());
        let blocks: Vec<Arc<Block>> = (0..4).map(|b| agents.new_block(7, b)).collect();
        let serials: Vec<u64> = (0..4)
            .flat_map(|b| first_serial(b)..first_serial(b) + SERIAL_BLOCK)
            .collect();
        for &s in &serials {
            agents.begin(&blocks[block_of(s) as usize], s);
        }
        let sender = {
            let agents = agents.clone();
            let serials = serials.clone();
            std::thread::spawn(move || {
                for round in 0..50 {
                    for &s in serials.iter().skip(round % 3) {
                        let _ = agents.shard(&id(s)).mailbox(&id(s)).is_some();
                    }
                }
            })
        };
        for &s in serials.iter().rev() {
            agents.end(&Presence {
                id: id(s),
                block: Some(blocks[block_of(s) as usize].clone()),
            });
        }
        sender.join().unwrap();
        assert!(
            agents.is_empty(),
            "a mailbox or block outlived its transactions"
        );
    }
}
