//! The one executor of [`AgentCore`] effects: the agent actor and the leader's member actor
//! (through [`crate::state_machine`]) both carry out their core's effects here.
//!
//! It owns what goes over the [`Router`] and the rule for a lock server found unreachable:
//! - [`AgentEffect::ToServer`] and [`AgentEffect::ToAgent`] are sent; a message to an agent that
//!   is gone is dropped (the deadlock detection does not count on it arriving); the requests go
//!   through the port of the core's own agent ([`AgentPort`]), which sends nothing in the name
//!   of another;
//! - a request that cannot be sent to a lock server is fed back to the core as
//!   [`AgentCore::unreachable`], once per node and call, after the effects given; what that
//!   produces is carried out in turn, in order;
//! - every other effect (replies to callers, status, grants, losses, an abort...) is the
//!   actor's, handed to its `rest` in order. `rest` may stop the execution (an abort): the
//!   effects after it are dropped.
//!
//! It also counts, on the node's metric handles (`locks_server::metrics`), what the effects
//! show: a victim's first probe round a cycle (a deadlock detected), its surrender or abort (a
//! deadlock resolved), voluntary surrenders, lost locks by cause, and the surrenders the
//! servers ignored. Each is one atomic add on a handle registered when the node started.
//!
//! [`end`] is the release of an agent: the core's [`AgentCore::end`] (its callers fail, and
//! every lock server it used is asked to drop its entries), carried out here.

use crate::core::{AgentCore, AgentEffect};
use locks_core::NodeId;
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_server::RouteError;
use locks_server::embed::AgentPort;
use locks_server::metrics::NodeMetrics;
use std::ops::ControlFlow;
use tracing::{debug, trace, warn};

/// What came of an [`execute`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Executed {
    /// A lock server was found unreachable: the core has news to settle.
    pub unreachable: bool,
    /// `rest` stopped the execution; the effects after it were dropped.
    pub stopped: bool,
}

/// Carries out `effects` of `core` in order (see the module documentation): sends what goes
/// over `router`, tells the core of lock servers found unreachable, and hands everything else
/// to `rest`.
pub fn execute(
    router: &AgentPort,
    core: &mut AgentCore,
    effects: Vec<AgentEffect>,
    rest: &mut dyn FnMut(AgentEffect) -> ControlFlow<()>,
) -> Executed {
    let metrics = router.metrics();
    let ignored = core.take_ignored_surrenders();
    if ignored > 0 {
        metrics.surrenders_ignored.increment(ignored);
    }
    let mut done = Executed::default();
    let mut effects = effects;
    loop {
        let mut unreachable: Vec<NodeId> = Vec::new();
        for effect in effects {
            count(metrics, core, &effect);
            match effect {
                AgentEffect::ToServer { node, request } => {
                    trace!(target: "lock_path", hop = 4, agent = %core.id(), %node, "to the router");
                    match router.send_server(&node, request) {
                        Ok(()) => {}
                        // A core made with another id than its port's: nothing was sent, and the
                        // server is no less reachable.
                        Err(err @ RouteError::NotThisAgent { .. }) => {
                            warn!(agent = %core.id(), %node, %err, "request not sent");
                        }
                        Err(err) => {
                            // A node known down, or a release at a stop (the node may be
                            // stopping too), is no surprise.
                            if matches!(err, RouteError::NotConnected(_)) || !core.is_running() {
                                debug!(agent = %core.id(), %node, %err, "lock server unreachable");
                            } else {
                                warn!(agent = %core.id(), %node, %err, "lock server unreachable");
                            }
                            if !unreachable.contains(&node) {
                                unreachable.push(node);
                            }
                        }
                    }
                }
                AgentEffect::ToAgent { to, msg } => match router.send_agent(&to, msg) {
                    Ok(()) => {}
                    // A core made with another id than its port's: nothing was sent.
                    Err(
                        err @ (RouteError::NotThisAgent { .. } | RouteError::NoAgentSender { .. }),
                    ) => {
                        warn!(agent = %core.id(), %to, %err, "agent message not sent");
                    }
                    Err(err) => {
                        trace!(agent = %core.id(), %to, %err, "agent message not delivered");
                    }
                },
                other => {
                    if rest(other).is_break() {
                        done.stopped = true;
                        return done;
                    }
                }
            }
        }
        if unreachable.is_empty() {
            return done;
        }
        done.unreachable = true;
        effects = unreachable
            .iter()
            .flat_map(|node| core.unreachable(node))
            .collect();
    }
}

/// Counts what `effect` shows on the node's metrics (module documentation).
fn count(metrics: &NodeMetrics, core: &AgentCore, effect: &AgentEffect) {
    match effect {
        AgentEffect::ToServer { request, .. } => match request {
            ServerRequest::Surrender { .. } => {
                metrics.surrenders_deadlock.increment(1);
                metrics.deadlocks_resolved.increment(1);
            }
            ServerRequest::SurrenderTo { .. } => metrics.surrenders_voluntary.increment(1),
            _ => {}
        },
        // Only the victim sends a probe that starts at its first edge (`core/agent/probe.rs`).
        AgentEffect::ToAgent {
            msg: AgentMessage::Probe(probe),
            ..
        } if probe.next == 0 && !probe.refuted && probe.victim() == Some(core.id()) => {
            metrics.deadlocks_detected.increment(1);
        }
        AgentEffect::Abort { .. } => {
            metrics.aborts.increment(1);
            metrics.deadlocks_resolved.increment(1);
        }
        AgentEffect::Lost(lost) => metrics.lost(lost.cause),
        _ => {}
    }
}

/// Ends `core` and carries out its release: its waiting callers' replies go to `rest`, and
/// every lock server it used is asked to drop its entries. Nothing is done for a core that has
/// ended already.
pub fn end(
    router: &AgentPort,
    core: &mut AgentCore,
    rest: &mut dyn FnMut(AgentEffect) -> ControlFlow<()>,
) {
    let effects = core.end();
    let _ = execute(router, core, effects, rest);
}
