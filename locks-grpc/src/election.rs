//! Leader election for clients (`Campaign`, `Observe`): a member of a `locks_leader` group run
//! by the node for the client, a candidate or a worker, whose changes of leader are streamed.
//! The member is stopped, resigning if it led, as soon as the client's stream is gone.

use crate::convert::Refusal;
use crate::limits::SessionPermit;
use crate::pb;
use futures::Stream;
use locks_core::{Key, MemberId, NodeId};
use locks_leader::{
    CallReturn, Callbacks, Caller, Ctx, Elected, GroupOptions, Handled, Member, Role, Term,
};
use locks_server::Node;
use std::pin::Pin;
use tonic::{Code, Status};

/// The longest group name accepted.
const MAX_GROUP_BYTES: usize = 256;

/// A member that only elects: no state, no calls.
pub(crate) struct Elector;

impl Callbacks for Elector {
    type Call = ();
    type Reply = ();
    type Cast = ();
    type Broadcast = ();
    type Info = ();

    fn elected(&mut self, _: Option<&MemberId>, _: &mut Ctx<'_, Self>) -> Elected<()> {
        Elected::Broadcast(())
    }

    fn surrendered(&mut self, _: (), _: &mut Ctx<'_, Self>) -> Handled<()> {
        Handled::Ok
    }

    fn from_leader(&mut self, _: (), _: &mut Ctx<'_, Self>) -> Handled<()> {
        Handled::Ok
    }

    fn handle_leader_call(
        &mut self,
        _: (),
        _: Caller,
        _: &mut Ctx<'_, Self>,
    ) -> CallReturn<(), ()> {
        CallReturn::Reply(())
    }

    fn handle_call(&mut self, _: (), _: Caller, _: &mut Ctx<'_, Self>) -> CallReturn<(), ()> {
        CallReturn::Reply(())
    }
}

/// The group and options of a request, checked.
pub(crate) fn parse(request: &pb::ElectionRequest) -> Result<(Key, GroupOptions), Refusal> {
    if request.group.is_empty() || request.group.len() > MAX_GROUP_BYTES {
        return Err(Refusal::new(
            Code::InvalidArgument,
            format!("a group name has 1 to {MAX_GROUP_BYTES} bytes"),
        ));
    }
    let mut options = GroupOptions::majority();
    if !request.nodes.is_empty() {
        let nodes = request
            .nodes
            .iter()
            .map(|n| {
                NodeId::new(n.as_str()).map_err(|e| {
                    Refusal::new(Code::InvalidArgument, format!("bad node name {n:?}: {e}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        options = options.nodes(nodes);
    }
    Ok((Key::from(request.group.as_str()), options))
}

fn event(term: Option<&Term>, me: Option<&MemberId>) -> pb::LeaderEvent {
    match term {
        None => pb::LeaderEvent::default(),
        Some(t) => pb::LeaderEvent {
            has_leader: true,
            leader: t.leader.to_string(),
            leader_node: t.leader.node().to_string(),
            term: t.epoch,
            is_this_campaign: me == Some(&t.leader),
        },
    }
}

/// The stream of a campaign (`Role::Candidate`) or an observation (`Role::Worker`).
pub(crate) type LeaderStream = Pin<Box<dyn Stream<Item = Result<pb::LeaderEvent, Status>> + Send>>;

/// Starts the member and streams its changes of leader until the client's stream is gone.
pub(crate) async fn run(
    node: &Node,
    request: &pb::ElectionRequest,
    role: Role,
    permit: SessionPermit,
) -> Result<LeaderStream, Status> {
    let (group, options) = parse(request).map_err(|r| Status::new(r.code, r.message))?;
    let member: Member<Elector> = locks_leader::start_with(node, group, Elector, role, options)
        .await
        .map_err(|e| Status::unavailable(format!("cannot start the member: {e}")))?;
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let me = (role == Role::Candidate).then(|| member.id().clone());
        let mut changes = member.changes();
        loop {
            let current = event(changes.current().as_ref(), me.as_ref());
            if tx.send(Ok(current)).await.is_err() {
                break;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                () = tx.closed() => break,
            }
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
