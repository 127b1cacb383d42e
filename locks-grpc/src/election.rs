//! Leader election for clients (`Campaign`, `Observe`, `Proclaim`): a member of a
//! `locks_leader` group run by the node for the client, a candidate or a worker, whose changes
//! of leader, and of the leader's value, are streamed. The member is stopped, resigning if it
//! led, as soon as the client's stream is gone.
//!
//! The leader's value travels as the group's broadcast: a leader announces its campaign's
//! value when elected (and to every member it syncs later), and `Proclaim` makes it broadcast a
//! new one, answered once members on a majority of the group's nodes have it. Every member
//! keeps the value it last heard in a watch that its stream follows. Campaigns running on this
//! node are kept by member id while their stream lasts, for `Proclaim` to find.

use crate::limits::SessionPermit;
use crate::pb;
use crate::wire::WireRefusal;
use futures::Stream;
use locks_core::{Key, MemberId, NodeId};
use locks_leader::{
    CallError, CallReturn, Callbacks, Caller, Ctx, Elected, GroupOptions, Handled, Member, Role,
    Term,
};
use locks_server::Node;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;
use tonic::{Code, Status};

/// The longest group name accepted.
const MAX_GROUP_BYTES: usize = 256;

/// The longest leader value accepted.
pub(crate) const MAX_VALUE_BYTES: usize = 64 * 1024;

/// A member that elects and carries the leader's value.
pub(crate) struct Elector {
    /// This member's own value: announced when it leads.
    value: Vec<u8>,
    /// The leader's value as this member last heard it (its own while it leads).
    heard: watch::Sender<Vec<u8>>,
}

impl Callbacks for Elector {
    /// A value to proclaim.
    type Call = Vec<u8>;
    /// `Err(NotLeader)` when this member does not lead.
    type Reply = Result<(), CallError>;
    type Cast = ();
    /// The leader's value.
    type Broadcast = Vec<u8>;
    type Info = ();

    fn elected(&mut self, _: Option<&MemberId>, _: &mut Ctx<'_, Self>) -> Elected<Vec<u8>> {
        self.heard.send_replace(self.value.clone());
        Elected::Broadcast(self.value.clone())
    }

    fn surrendered(&mut self, value: Vec<u8>, _: &mut Ctx<'_, Self>) -> Handled<Vec<u8>> {
        self.heard.send_replace(value);
        Handled::Ok
    }

    fn from_leader(&mut self, value: Vec<u8>, _: &mut Ctx<'_, Self>) -> Handled<Vec<u8>> {
        self.heard.send_replace(value);
        Handled::Ok
    }

    fn handle_leader_call(
        &mut self,
        _: Vec<u8>,
        _: Caller,
        _: &mut Ctx<'_, Self>,
    ) -> CallReturn<Result<(), CallError>, Vec<u8>> {
        CallReturn::Reply(Err(CallError::NotLeader))
    }

    /// A proclamation: taken by the leader, broadcast, answered once a majority has it.
    fn handle_call(
        &mut self,
        value: Vec<u8>,
        _: Caller,
        ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<Result<(), CallError>, Vec<u8>> {
        if !ctx.is_leader() {
            return CallReturn::Reply(Err(CallError::NotLeader));
        }
        self.value = value.clone();
        self.heard.send_replace(value.clone());
        CallReturn::ReplyBroadcast(Ok(()), value)
    }
}

/// The bytes of a campaign's secret.
const SECRET_BYTES: usize = 16;

/// A campaign running here and the secret that proves a proclamation is its own.
#[derive(Clone)]
struct Running {
    member: Member<Elector>,
    secret: [u8; SECRET_BYTES],
}

/// The campaigns running on this node, by member id, while their streams last.
#[derive(Clone, Default)]
pub(crate) struct Campaigns(Arc<Mutex<HashMap<String, Running>>>);

impl Campaigns {
    fn insert(&self, member: &Member<Elector>, secret: [u8; SECRET_BYTES]) {
        let running = Running {
            member: member.clone(),
            secret,
        };
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(member.id().to_string(), running);
    }

    fn remove(&self, member: &Member<Elector>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&member.id().to_string());
    }

    fn get(&self, id: &str) -> Option<Running> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }
}

/// Serves `Proclaim`: the campaign named must run here, in `group`, lead in `term`, and the
/// request must carry its secret.
pub(crate) async fn proclaim(
    campaigns: &Campaigns,
    request: pb::ProclaimRequest,
) -> Result<(), Status> {
    if request.value.len() > MAX_VALUE_BYTES {
        return Err(Status::invalid_argument(format!(
            "a value has at most {MAX_VALUE_BYTES} bytes"
        )));
    }
    let not_leading = || {
        Status::failed_precondition(format!(
            "{} does not lead {:?} in term {} (or is not a campaign of this node)",
            request.leader, request.group, request.term
        ))
    };
    let running = campaigns.get(&request.leader).ok_or_else(not_leading)?;
    if !crate::auth::same(&request.campaign_secret, &running.secret) {
        return Err(Status::permission_denied(format!(
            "only the campaign of {} may proclaim for it: the request lacks its secret \
             (LeaderEvent.campaign_secret on that campaign's stream)",
            request.leader
        )));
    }
    let member = running.member;
    let leads = member
        .leader()
        .is_some_and(|t| t.leader == *member.id() && t.epoch == request.term);
    if *member.group() != Key::from(request.group.as_str()) || !leads {
        return Err(not_leading());
    }
    match member.call(request.value).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(CallError::NotLeader)) => Err(not_leading()),
        Ok(Err(e)) | Err(e) => Err(Status::unavailable(format!("not proclaimed: {e}"))),
    }
}

/// The group and options of a request, checked.
pub(crate) fn parse(request: &pb::ElectionRequest) -> Result<(Key, GroupOptions), WireRefusal> {
    if request.group.is_empty() || request.group.len() > MAX_GROUP_BYTES {
        return Err(WireRefusal::new(
            Code::InvalidArgument,
            format!("a group name has 1 to {MAX_GROUP_BYTES} bytes"),
        ));
    }
    if request.value.len() > MAX_VALUE_BYTES {
        return Err(WireRefusal::new(
            Code::InvalidArgument,
            format!("a value has at most {MAX_VALUE_BYTES} bytes"),
        ));
    }
    let mut options = GroupOptions::majority();
    if !request.nodes.is_empty() {
        let nodes = request
            .nodes
            .iter()
            .map(|n| {
                NodeId::new(n.as_str()).map_err(|e| {
                    WireRefusal::new(Code::InvalidArgument, format!("bad node name {n:?}: {e}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        options = options.nodes(nodes);
    }
    Ok((Key::from(request.group.as_str()), options))
}

/// The event of a change: `secret` is the campaign's, for its own stream (empty for an
/// observer).
fn event(
    term: Option<&Term>,
    me: Option<&MemberId>,
    value: &[u8],
    secret: &[u8],
) -> pb::LeaderEvent {
    match term {
        None => pb::LeaderEvent {
            campaign_secret: secret.to_vec(),
            ..pb::LeaderEvent::default()
        },
        Some(t) => pb::LeaderEvent {
            has_leader: true,
            leader: t.leader.to_string(),
            leader_node: t.leader.node().to_string(),
            term: t.epoch,
            is_this_campaign: me == Some(&t.leader),
            value: value.to_vec(),
            campaign_secret: secret.to_vec(),
        },
    }
}

/// The stream of a campaign (`Role::Candidate`) or an observation (`Role::Worker`).
pub(crate) type LeaderStream = Pin<Box<dyn Stream<Item = Result<pb::LeaderEvent, Status>> + Send>>;

/// Starts the member and streams its changes of leader and value until the client's stream is
/// gone; a campaign is kept in `campaigns` meanwhile.
pub(crate) async fn run(
    node: &Node,
    request: &pb::ElectionRequest,
    role: Role,
    permit: SessionPermit,
    campaigns: &Campaigns,
) -> Result<LeaderStream, Status> {
    let (group, options) = parse(request).map_err(|r| Status::new(r.code, r.message))?;
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|e| Status::unavailable(format!("no randomness for the campaign: {e}")))?;
    let (heard, mut values) = watch::channel(Vec::new());
    let elector = Elector {
        value: request.value.clone(),
        heard,
    };
    let member: Member<Elector> = locks_leader::start_with(node, group, elector, role, options)
        .await
        .map_err(|e| Status::unavailable(format!("cannot start the member: {e}")))?;
    let campaigns = (role == Role::Candidate).then(|| campaigns.clone());
    let mut secret = Vec::new();
    if let Some(c) = &campaigns {
        c.insert(&member, bytes);
        secret = bytes.to_vec();
    }
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let me = (role == Role::Candidate).then(|| member.id().clone());
        let mut changes = member.changes();
        let mut last = None;
        loop {
            let term = changes.current();
            let current = event(
                term.as_ref(),
                me.as_ref(),
                &values.borrow_and_update(),
                &secret,
            );
            // A value heard again, or a term and value told already, is not sent twice.
            if last.as_ref() != Some(&current) {
                if tx.send(Ok(current.clone())).await.is_err() {
                    break;
                }
                last = Some(current);
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                changed = values.changed() => if changed.is_err() { break },
                () = tx.closed() => break,
                () = permit.evicted() => {
                    let _ = tx.try_send(Err(Status::resource_exhausted(crate::limits::EVICTED)));
                    break;
                }
            }
        }
        if let Some(c) = &campaigns {
            c.remove(&member);
        }
        member.stop().await;
        drop(permit);
    });
    Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_and_nodes_are_checked() {
        let request = |group: &str, nodes: &[&str]| pb::ElectionRequest {
            group: group.to_owned(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            value: vec![],
        };
        assert!(parse(&request("jobs", &["a", "b"])).is_ok());
        assert_eq!(
            parse(&request("", &[])).unwrap_err().code,
            Code::InvalidArgument
        );
        let long = "g".repeat(MAX_GROUP_BYTES + 1);
        assert_eq!(
            parse(&request(&long, &[])).unwrap_err().code,
            Code::InvalidArgument
        );
        let e = parse(&request("jobs", &["bad name!"])).unwrap_err();
        assert!(e.message.contains("bad node name"), "{}", e.message);
    }
}
